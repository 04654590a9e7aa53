"""Turn eval.py's results into the paper-style table (Markdown) and training curves (PNG).

    python -m measure.report runs/compare-<time>/results.json [runs/core runs/coder ...]   # re-render

Table: one row per system; per dataset, for every k: pass@k (points) with a significance mark and its 95 %
interval (measure/stats.py: percentile bootstrap over problems, stats.RESAMPLES resamples, seed stats.SEED), first;
then EffiBench's efficiency figures (measure/efficiency.py: ET ms, NET, MU MiB, NMU, % of passing programs
with NET > 2) over the problems that EVERY system in the table solves (at least one passing sample)
and whose reference solution passed: a system that solves more, harder problems would otherwise
look slower; in a table of their own below when fewer than EFF_MIN problems count.
Marks: each trained system is tested, paired on the same problems, against the base model in its own
mode (dagger), when it is in the table, the run it started from (its --init; double dagger), and the
runs listed before it that started from the same --init (section sign; e.g. collaborative vs single-agent):
McNemar's exact test when every per-problem score is 0 or 1 (greedy pass@1), else the paired
bootstrap; the mark means p < stats.ALPHA (two-sided: better or worse; the list below the table
gives the sign and p).
"""
import json
import os
import platform
import sys
from pathlib import Path

from measure import efficiency, stats

CURVES = [("reward", "mean reward"), ("pass_all", "pass rate (all tests)"), ("coder_kl", "KL (coder)"),
          ("code_tokens", "code tokens"), ("plan_tokens", "plan tokens")]
MARKS = ["†", "‡"]  # dagger: vs the base model in the same mode; double dagger: vs its --init run
SIBLING = "§"  # vs an earlier run of the table from the same --init
EFF_COLS = [("et_ms", "ET ms*", "{:.2f}", 1), ("net", "NET*", "{:.2f}", 1), ("mu_mb", "MU MiB*", "{:.2f}", 1),
            ("nmu", "NMU*", "{:.2f}", 1), ("slow_share", "NET>2 %*", "{:.1f}", 100)]


def _aligned(rows: dict, a: str, b: str, k: int) -> tuple[list, list]:
    """Per-problem pass@k of systems a and b on the problems both were run on, in one order."""
    sa = dict(zip((p["task_id"] for p in rows[a]["problems"]), stats.problem_scores(rows[a]["problems"], k)))
    sb = dict(zip((p["task_id"] for p in rows[b]["problems"]), stats.problem_scores(rows[b]["problems"], k)))
    ids = [t for t in sa if t in sb]
    return [sa[t] for t in ids], [sb[t] for t in ids]


def significance(results: dict) -> dict:
    """{(dataset, system, reference system, k): stats.paired_test result} for every tested pair."""
    out = {}
    for d, rows in results["results"].items():
        for s in results["systems"]:
            for ref in s.get("against", []) + s.get("siblings", []):
                if s["name"] in rows and ref in rows:
                    for k in results["ks"]:
                        out[d, s["name"], ref, k] = stats.paired_test(*_aligned(rows, ref, s["name"], k))
    return out


EFF_MIN = 10  # fewer problems solved by every system: efficiency gets a table of its own (our choice)


def markdown(results: dict) -> str:
    """The table (module docstring): pass@k with its interval first, for every set; then EffiBench's columns in
    the same table when every set has at least EFF_MIN problems all systems solve, else in a table of their own
    below it (a mean over a handful of problems is no headline); then the token budgets, the paired tests,
    verdicts, tokens and generation times."""
    ks, datasets = results["ks"], list(results["results"])
    head, eff_head, eff, common = ["system", "mode"], [], {}, {}
    for d in datasets:
        eff[d], common[d] = efficiency.summary(results["results"][d])
        for k in ks:
            head += [f"{d} pass@{k}", f"{d} pass@{k} 95% CI"]
        eff_head += [f"{d} {title}" for _, title, _, _ in EFF_COLS]
    apart = min(common.values(), default=0) < EFF_MIN
    tests = significance(results)
    rows_of, eff_rows = [], []
    for s in results["systems"]:
        cells, eff_cells = [s["name"], s["mode"]], [s["name"], s["mode"]]
        for d in datasets:
            rows = results["results"][d]
            row = rows.get(s["name"])
            if row is None:  # not computed (eval --cached-only: not in the cache yet)
                cells += ["not run", ""] * len(ks)
                eff_cells += ["–"] * len(EFF_COLS)
                continue
            for k in ks:
                lo, hi = stats.bootstrap_ci(stats.problem_scores(row["problems"], k))
                refs = [(MARKS[min(i, len(MARKS) - 1)], ref) for i, ref in enumerate(s.get("against", []))]
                mark = "".join(m for m, ref in refs + [(SIBLING, ref) for ref in s.get("siblings", [])]
                               if tests.get((d, s["name"], ref, k), {}).get("significant"))
                cells += [f"{100 * row[f'pass@{k}']:.1f}{mark}", f"[{100 * lo:.1f}, {100 * hi:.1f}]"]
            for key, _, fmt, scale in EFF_COLS:
                v = eff[d][s["name"]][key]
                eff_cells.append("–" if v is None else fmt.format(scale * v))
        rows_of.append(cells + ([] if apart else eff_cells[2:]))
        eff_rows.append(eff_cells)
    table = lambda h, rs: ["| " + " | ".join(h) + " |", "|" + "---|" * len(h)] + [  # noqa: E731
        "| " + " | ".join(c) + " |" for c in rs]
    lines = table(head + ([] if apart else eff_head), rows_of)
    notes = ", ".join(f"{d}: {common[d]}" for d in datasets)
    if apart:
        lines += [f"\nEfficiency over the problems every system solves ({notes}: fewer than {EFF_MIN}, so apart and "
                  "read with care):\n"] + table(["system", "mode"] + eff_head, eff_rows)
    if results.get("max_code_tokens"):
        lines.append(f"\nToken budgets: {results['max_code_tokens']} per program, {results['max_plan_tokens']} per plan "
                     "(eval.py's --max-code-tokens / --max-plan-tokens; train.py samples 128 / 48 by default).")
    lines.append(f"\nn={results['n']}, temperature={results['temperature']}. 95 % CI: percentile bootstrap over "
                 f"problems ({stats.RESAMPLES:,} resamples, seed {stats.SEED}). {MARKS[0]} / {MARKS[1]}: paired "
                 f"test against the base model in the same mode / the run it started from, {SIBLING}: against an earlier "
                 f"run from the same start, p < {stats.ALPHA} "
                 "(McNemar's exact test when every per-problem score is 0 or 1, else the paired bootstrap).")
    if results.get("checkers"):
        lines.append("\nOutput checkers of the I/O tests (sandboxing/checkers.py): "
                     + "; ".join(f"{d}: {checker_note(results['checkers'].get(d, {}))}" for d in datasets) + ".")
    lines.append(f"\n\\* EffiBench's metrics (Huang et al. 2024) over the problems every system solves and whose "
                 f"reference passed ({notes}): ET = CPU ms of the whole run, MU = its peak MiB, both measured "
                 f"outside the run less an empty program's (sandboxing/cost.py); NET / NMU = the same over the reference solution's on the same tests "
                 f"(floors {1000 * efficiency.ET_FLOOR_S:g} ms / {efficiency.MU_FLOOR_MB:g} MiB); NET>2 % = share "
                 "of passing programs more than twice as slow as the reference.")
    if tests:
        lines.append("\npaired tests (B vs A: difference of B minus A in points):\n")
        for (d, s, ref, k), t in tests.items():
            how = (f"McNemar exact, only A {t['b']}, only B {t['c']}" if t["method"] == "mcnemar" else
                   f"paired bootstrap, 95 % CI [{100 * t['lo']:+.1f}, {100 * t['hi']:+.1f}]" if t["method"] == "bootstrap"
                   else "no common problems")
            lines.append(f"- {d} pass@{k} · {s} vs {ref}: {100 * t['diff']:+.1f} ({how}); p = {t['p']:.3g}"
                         + (" (significant)" if t["significant"] else ""))
    lines.append("\nverdicts / mean tokens / generation time:\n")
    for d in datasets:
        for s in results["systems"]:
            row = results["results"][d].get(s["name"])
            if row is None:
                continue
            toks = f"plan {row['plan_tokens']:.0f}, " if row.get("plan_tokens") is not None else ""
            calls = (f"{row['calls_per_problem']:.1f} model calls per problem, decisions by the default "
                     f"{row['fallback_rate']:.0%}; " if row.get("fallback_rate") is not None else "")  # collab
            lines.append(f"- {d} · {s['name']}: {row['verdicts']}; {toks}code {row['code_tokens']:.0f} tokens; "
                         f"{calls}{row['generation_s']:.0f} s")
    return "\n".join(lines)


def checker_note(counts: dict) -> str:
    """One dataset's checkers.describe counts in words.

    >>> checker_note({"codeforces": 5, "special": 2}), checker_note({})
    ('codeforces (5 problems, 2 with their own checker program)', 'none (function tests only)')
    """
    if not counts:
        return "none (function tests only)"
    special = counts.get("special", 0)
    return ", ".join(f"{name} ({n} problem{'s' * (n != 1)}" + (f", {special} with their own checker program"
                                                              if special and name == "codeforces" else "") + ")"
                     for name, n in counts.items() if name != "special")


EVAL_CURVE = ("eval_pass@1", "held-out pass@1 (greedy)")  # from the eval lines (train.py --eval-data)


def plot_curves(run_dirs: list, out_png: Path) -> str:
    """One panel per CURVES metric (+ EVAL_CURVE third) over GRPO steps, a line per run; written
    atomically. Needs matplotlib (optional)."""
    curves = CURVES[:2] + [EVAL_CURVE] + CURVES[2:]
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "curves skipped: matplotlib is not installed (pip install matplotlib)"
    fig, axes = plt.subplots(1, len(curves), figsize=(4 * len(curves), 3.2))
    drawn = set()
    for i, run in enumerate(map(Path, run_dirs)):
        lines = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
        for ax, (key, title) in zip(axes, curves):
            phase = "eval" if key.startswith("eval_") else "grpo"  # eval lines: step 0, every K, the end
            pts = [(m["step"], m[key]) for m in lines if m.get("phase", "grpo") == phase and m.get(key) is not None]
            if pts:
                ax.plot(*zip(*pts), marker="o", color=f"C{i}", label=run.name)  # one colour per run
                drawn.add(key)
            ax.set_title(title)
            ax.set_xlabel("GRPO step")
    for ax, (key, _) in zip(axes, curves):
        if key not in drawn:  # e.g. KL with beta = 0: not computed
            ax.text(0.5, 0.5, "not logged", ha="center", transform=ax.transAxes)
    if drawn:
        axes[0].legend()
    return save_figure(fig, out_png, dpi=100)


def save_figure(fig, out_png: Path, dpi: int = 100) -> str:
    """A matplotlib figure laid out, written as PNG through a temporary file and one rename (a reader never sees
    half a picture), and closed; returns 'wrote PATH'."""
    import matplotlib.pyplot as plt

    fig.tight_layout()
    out_png = Path(out_png)
    tmp = out_png.with_name(f".{out_png.name}.tmp")
    fig.savefig(tmp, dpi=dpi, format="png")
    plt.close(fig)
    os.replace(tmp, out_png)
    return f"wrote {out_png}"


def machine() -> str:
    """CPU model name (as lscpu prints it, from /proc/cpuinfo) and the number of cores; the GPU when torch sees one."""
    name = platform.processor() or platform.machine()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                name = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    gpu = ""
    if "torch" in sys.modules and sys.modules["torch"].cuda.is_available():
        gpu = ", GPU " + sys.modules["torch"].cuda.get_device_name(0)
    return f"{name}, {os.cpu_count()} cores{gpu}"


def write_text_atomic(path: Path, text: str):
    """Write `text` to `path` through a temporary file and one rename: a crash never leaves half a file."""
    import os

    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)


def write(results: dict, out_dir: Path, run_dirs: list) -> str:
    """results.json, results.md (each written atomically) and curves.png into out_dir; returns the Markdown table."""
    out_dir = Path(out_dir)
    write_text_atomic(out_dir / "results.json", json.dumps(results, indent=1))
    md = markdown(results)
    write_text_atomic(out_dir / "results.md", md + "\n")
    return md + "\n\n" + plot_curves([r for r in run_dirs if (Path(r) / "metrics.jsonl").exists()],
                                     out_dir / "curves.png")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python -m measure.report results.json [run_dir ...]")
    res = json.loads(Path(sys.argv[1]).read_text())
    print(write(res, Path(sys.argv[1]).parent, sys.argv[2:]))
