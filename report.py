"""Turn eval.py's results into the paper-style table (Markdown) and training curves (PNG).

    python report.py runs/compare-<time>/results.json [runs/core runs/coder ...]   # re-render

Table: rows = systems, columns = datasets x (pass@k, median CPU ms and peak MiB of correct code).
Efficiency is compared on the problems that EVERY system in the table solves (at least one passing
sample): a system that solves more, harder problems would otherwise look slower.
"""
import json
import statistics
import sys
from pathlib import Path

CURVES = [("reward", "mean reward"), ("pass_all", "pass rate (all tests)"), ("coder_kl", "KL (coder)"),
          ("code_tokens", "code tokens"), ("plan_tokens", "plan tokens")]


def efficiency(rows: dict) -> tuple[dict, int]:
    """Median CPU ms and peak MiB per system over the commonly solved problems.

    rows: {system: eval row with 'problems': [{task_id, cpu_ms, peak_mb}]}, cpu_ms None = unsolved.
    Returns ({system: (median ms, median MiB) or (None, None)}, number of common problems).
    """
    solved = [{p["task_id"] for p in r["problems"] if p["cpu_ms"] is not None} for r in rows.values()]
    common = set.intersection(*solved) if solved else set()
    out = {}
    for name, r in rows.items():
        ps = [p for p in r["problems"] if p["task_id"] in common]
        out[name] = ((statistics.median(p["cpu_ms"] for p in ps), statistics.median(p["peak_mb"] for p in ps))
                     if ps else (None, None))
    return out, len(common)


def markdown(results: dict) -> str:
    """The table: one row per system, for each dataset pass@k, then ms / MiB on common problems."""
    ks, datasets = results["ks"], list(results["results"])
    head, eff, common = ["system", "mode"], {}, {}
    for d in datasets:
        eff[d], common[d] = efficiency(results["results"][d])
        head += [f"{d} pass@{k}" for k in ks] + [f"{d} ms*", f"{d} MiB*"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for s in results["systems"]:
        cells = [s["name"], s["mode"]]
        for d in datasets:
            row = results["results"][d][s["name"]]
            ms, mb = eff[d][s["name"]]
            cells += [f"{100 * row[f'pass@{k}']:.1f}" for k in ks]
            cells += ["–" if ms is None else f"{ms:.0f}", "–" if mb is None else f"{mb:.1f}"]
        lines.append("| " + " | ".join(cells) + " |")
    notes = ", ".join(f"{d}: {common[d]}" for d in datasets)
    lines.append(f"\n\\* median over the problems every system solves ({notes}); CPU ms of the sandboxed "
                 f"run and its peak RSS. n={results['n']}, temperature={results['temperature']}.")
    lines.append("\nverdicts / mean tokens / generation time:\n")
    for d in datasets:
        for s in results["systems"]:
            row = results["results"][d][s["name"]]
            toks = f"plan {row['plan_tokens']:.0f}, " if row.get("plan_tokens") is not None else ""
            lines.append(f"- {d} · {s['name']}: {row['verdicts']}; {toks}code {row['code_tokens']:.0f} tokens; "
                         f"{row['generation_s']:.0f} s")
    return "\n".join(lines)


EVAL_CURVE = ("eval_pass@1", "held-out pass@1 (greedy)")  # from the eval lines (train.py --eval-data)


def plot_curves(run_dirs: list, out_png: Path) -> str:
    """One panel per CURVES metric (+ EVAL_CURVE third) over GRPO steps, a line per run; written
    atomically. Needs matplotlib (optional)."""
    import os

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
    axes[0].legend()
    fig.tight_layout()
    out_png = Path(out_png)
    tmp = out_png.with_name(f".{out_png.name}.tmp")
    fig.savefig(tmp, dpi=100, format="png")
    plt.close(fig)
    os.replace(tmp, out_png)  # atomic: a reader never sees half a picture
    return f"wrote {out_png}"


def write(results: dict, out_dir: Path, run_dirs: list) -> str:
    """results.json, results.md and curves.png into out_dir; returns the Markdown table."""
    out_dir = Path(out_dir)
    (out_dir / "results.json").write_text(json.dumps(results, indent=1))
    md = markdown(results)
    (out_dir / "results.md").write_text(md + "\n")
    return md + "\n\n" + plot_curves([r for r in run_dirs if (Path(r) / "metrics.jsonl").exists()],
                                     out_dir / "curves.png")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: python report.py results.json [run_dir ...]")
    res = json.loads(Path(sys.argv[1]).read_text())
    print(write(res, Path(sys.argv[1]).parent, sys.argv[2:]))
