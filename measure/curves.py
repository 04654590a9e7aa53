"""Learning curves of several runs side by side: held-out (dev) pass@1 at each evaluated step with its 95 %
interval, beside the training diagnostics that explain a curve; one PNG and one Markdown table.

    python -m measure.curves runs/learn                 # every run inside that has GRPO steps -> runs/learn/curves.{png,md}
    python -m measure.curves runs/core runs/coder --out runs/cmp

What it reads, per run folder (train.py writes them): config.json, metrics.jsonl (a line per GRPO step and per
evaluation: train.py --eval-data), samples.jsonl (the first program of each problem of each step: which problems
the run has seen). The interval of a dev point is the percentile bootstrap over problems of stats.bootstrap_ci
(the same as every table of the project), from the number solved; two points of one run, or the last points
of two runs, are compared paired (McNemar exact, stats.mcnemar_exact) where the eval line lists the problems
solved (`eval_solved`).
Diagnostics per GRPO step (a rolling mean over SMOOTH steps: single steps of 2 problems are noisy): the mean
reward, the share of programs passing every test, the share of the Coder's groups with no spread (no signal),
the entropy proxy (mean -log pi of the sampled tokens), the mean code length, the clip fraction (0 by construction
with one update per batch of rollouts: rho = 1), the KL (logged only with --beta > 0), and how many distinct
training problems the run has seen.
"""
import argparse
import json
import sys
from pathlib import Path

from measure import stats
from measure.report import save_figure, write_text_atomic

SMOOTH = 10  # steps in the rolling mean of the per-step diagnostics
DIAGNOSTICS = [("reward", "training reward"), ("pass_all", "programs passing all tests"),
               ("frac_zero_std_coder", "Coder groups with no spread"), ("neg_logp_coder", "entropy proxy, Coder (nats/token)"),
               ("code_tokens", "code tokens"), ("coder_clip_frac", "clip fraction, Coder (0 when rho = 1)"),
               ("coder_kl", "KL, Coder")]


def read_jsonl(path: Path) -> list:
    """The JSON lines of a file ([] when it does not exist); a line cut short by a crash is left out."""
    rows = []
    if Path(path).exists():
        for line in Path(path).read_text().splitlines():
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def load_run(run_dir: Path) -> dict:
    """One run: {name, config, grpo: [step lines], evals: [eval lines], seen: [distinct problems seen after each
    GRPO step]}; evaluation lines of a resumed run that repeat a step keep the last."""
    run_dir = Path(run_dir)
    lines = read_jsonl(run_dir / "metrics.jsonl")
    config = json.loads((run_dir / "config.json").read_text()) if (run_dir / "config.json").exists() else {}
    grpo = {m["step"]: m for m in lines if m.get("phase") == "grpo"}
    evals = {m["step"]: m for m in lines if m.get("phase") == "eval"}
    ids, seen, by_step = set(), [], {}
    for s in read_jsonl(run_dir / "samples.jsonl"):
        by_step.setdefault(s["step"], set()).add(s["task_id"])
    for step in sorted(grpo):
        ids |= by_step.get(step, set())
        seen.append(len(ids))
    return {"name": run_dir.name, "config": config, "grpo": [grpo[k] for k in sorted(grpo)],
            "evals": [evals[k] for k in sorted(evals)], "seen": seen}


def scores(m: dict) -> list:
    """An eval line's per-problem scores in [0, 1], in task-id order: passed / n of a sampled line (eval_scores),
    else 1 for each of the eval_solved problems and 0 for the rest (greedy)."""
    if "eval_scores" in m:
        return [m["eval_scores"][t] for t in sorted(m["eval_scores"])]
    solved = round(m["eval_pass@1"] * m["eval_problems"])
    return [1.0] * solved + [0.0] * (m["eval_problems"] - solved)


def dev_point(m: dict) -> dict:
    """An eval line -> {step, n, solved, pass1, lo, hi} (pass@1 and its 95 % bootstrap interval over problems,
    fractions; solved: the problems' scores summed, a whole number when greedy).

    >>> p = dev_point({"step": 7, "eval_pass@1": 10 / 53, "eval_problems": 53})
    >>> p["solved"], round(p["pass1"], 4)
    (10, 0.1887)
    >>> dev_point({"step": 1, "eval_pass@1": 0.375, "eval_problems": 2, "eval_scores": {"a": 0.5, "b": 0.25}})["solved"]
    0.75
    """
    n, values = m["eval_problems"], scores(m)
    lo, hi = stats.bootstrap_ci(values)
    solved = sum(values) if "eval_scores" in m else round(sum(values))
    return {"step": m["step"], "n": n, "solved": solved, "pass1": sum(values) / n if n else 0.0, "lo": lo, "hi": hi}


def rolling(values: list, window: int = SMOOTH) -> list:
    """Trailing mean over the last `window` values that are not None (None where none is).

    >>> rolling([1, 2, None, 4], 2)
    [1.0, 1.5, 2.0, 4.0]
    """
    out = []
    for i in range(len(values)):
        last = [v for v in values[max(0, i - window + 1):i + 1] if v is not None]
        out.append(sum(last) / len(last) if last else None)
    return out


def drawn(run: dict, m: dict) -> int:
    """The problems one GRPO step line drew and rolled out: problems per step, or with --dynamic-sampling N its
    dynamic_drawn (N x as many: all are sampled and judged, only the kept enter the loss)."""
    return m.get("dynamic_drawn", run["config"].get("problems_per_step", 0))


def compute(run: dict) -> dict:
    """What a run had: GRPO steps, problems drawn (the sum of `drawn`), distinct problems seen, seconds of
    GRPO steps (evaluation not counted), and the sampled tokens (per step: plans x mean plan tokens + programs x
    mean code tokens, from the first rollout's means, for every problem drawn: an estimate)."""
    c, rows = run["config"], run["grpo"]
    plans = c.get("num_plans", 0) if "planner" in (c.get("roles") or []) else 0
    codes = c.get("num_plans", 0) * (c.get("codes_per_plan") or 4)
    tokens = sum(drawn(run, m) * (plans * (m.get("plan_tokens") or 0) + codes * (m.get("code_tokens") or 0))
                 for m in rows)
    return {"steps": len(rows), "drawn": sum(drawn(run, m) for m in rows), "seen": run["seen"][-1] if run["seen"] else 0,
            "grpo_s": sum(m.get("time_step_s", 0.0) for m in rows), "tokens": tokens}


def paired(a: dict, b: dict) -> str:
    """p of two eval lines on the same problems: McNemar exact for greedy lines (eval_solved), the paired bootstrap
    for sampled ones (eval_scores: passed / n a problem), stats.paired_test; '' when they cannot be paired."""
    if "eval_scores" in a and "eval_scores" in b and a["eval_scores"].keys() == b["eval_scores"].keys():
        return f"{stats.paired_test(scores(a), scores(b))['p']:.3f}"
    if "eval_solved" not in a or "eval_solved" not in b or a["eval_problems"] != b["eval_problems"] \
            or "eval_scores" in a or "eval_scores" in b:
        return ""
    sa, sb = set(a["eval_solved"]), set(b["eval_solved"])
    return f"{stats.mcnemar_exact(len(sa - sb), len(sb - sa)):.2f}"


def group_of(task_id: str) -> str:
    """The set a task id belongs to, for by_set: its prefix before the last '/' ('mbpp/514' -> 'mbpp';
    a synth id keeps its depth: 'synth-dev/d2/0007' -> 'synth-dev/d2')."""
    return task_id.rsplit("/", 1)[0]


def by_set(m: dict) -> str:
    """An eval line's solved problems counted by set (group_of), '' without eval_solved; a sampled line: each
    set's pass@1 %.

    >>> by_set({"eval_solved": ["mbpp/514", "core-val/0003", "mbpp/600"]})
    'mbpp 2, core-val 1'
    >>> by_set({"eval_scores": {"synth-dev/d1/0000": 0.5, "synth-dev/d1/0001": 1.0, "synth-dev/d2/0000": 0.0}})
    'synth-dev/d1 75.0 %, synth-dev/d2 0.0 %'
    """
    if "eval_scores" in m:
        groups = {}
        for t, v in m["eval_scores"].items():
            groups.setdefault(group_of(t), []).append(v)
        return ", ".join(f"{k} {100 * sum(v) / len(v):.1f} %" for k, v in sorted(groups.items()))
    counts = {}
    for t in m.get("eval_solved", []):
        counts[group_of(t)] = counts.get(group_of(t), 0) + 1
    return ", ".join(f"{k} {v}" for k, v in counts.items())


def markdown(runs: list) -> str:
    """The dev curve of every run as one table (a row per evaluated step), then each run's compute."""
    out = ["| run | step | problems drawn | distinct seen | dev pass@1 % [95 % CI] | solved | by set | p vs step 0 |",
           "|---|---|---|---|---|---|---|---|"]
    for run in runs:
        first = run["evals"][0] if run["evals"] else None
        for m in run["evals"]:
            p, step = dev_point(m), m["step"]
            seen = run["seen"][step - 1] if 0 < step <= len(run["seen"]) else 0
            solved = f"{p['solved']:.2f}" if isinstance(p["solved"], float) else p["solved"]
            upto = sum(drawn(run, g) for g in run["grpo"] if g["step"] <= step)  # problems drawn by this step
            out.append(f"| {run['name']} | {step} | {upto} | {seen} | {100 * p['pass1']:.1f} "
                       f"[{100 * p['lo']:.1f}, {100 * p['hi']:.1f}] | {solved} / {p['n']} | {by_set(m)} | "
                       f"{paired(first, m) if step else ''} |")
    out += ["", "| run | GRPO steps | problems drawn | distinct seen | seconds of steps | sampled tokens (est.) |",
            "|---|---|---|---|---|---|"]
    for run in runs:
        c = compute(run)
        out.append(f"| {run['name']} | {c['steps']} | {c['drawn']} | {c['seen']} | {c['grpo_s']:.0f} | {c['tokens']:,.0f} |")
    lasts = [r for r in runs if r["evals"]]
    pairs = [f"{a['name']} vs {b['name']}: p = {paired(a['evals'][-1], b['evals'][-1])}"
             for i, a in enumerate(lasts) for b in lasts[i + 1:] if paired(a["evals"][-1], b["evals"][-1])]
    if pairs:
        out += ["", "Last points paired (McNemar exact; sampled lines: the paired bootstrap): " + "; ".join(pairs)]
    return "\n".join(out)


def plot(runs: list, out_png: Path) -> str:
    """The dev curve (points with their 95 % intervals) and the DIAGNOSTICS, a line per run, plus the distinct
    problems seen; written atomically. Needs matplotlib (optional)."""

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "curves skipped: matplotlib is not installed (pip install matplotlib)"
    fig, axes = plt.subplots(3, 3, figsize=(14, 10))
    axes = axes.flatten()
    for i, run in enumerate(runs):
        color = f"C{i}"
        pts = [dev_point(m) for m in run["evals"]]
        if pts:
            xs = [p["step"] for p in pts]
            axes[0].plot(xs, [100 * p["pass1"] for p in pts], marker="o", color=color, label=run["name"])
            axes[0].fill_between(xs, [100 * p["lo"] for p in pts], [100 * p["hi"] for p in pts], color=color, alpha=0.15)
        steps = [m["step"] for m in run["grpo"]]
        for ax, (key, _) in zip(axes[1:], DIAGNOSTICS):
            ys = rolling([m.get(key) for m in run["grpo"]])
            if any(y is not None for y in ys):
                ax.plot(steps, [float("nan") if y is None else y for y in ys], color=color, label=run["name"])
        axes[8].plot(steps, run["seen"], color=color, label=run["name"])
    first = next((r["evals"][0] for r in runs if r["evals"]), {})
    how = f"{first['eval_samples']} samples" if first.get("eval_samples", 1) > 1 else "greedy"
    axes[0].set_title(f"dev pass@1 %, {how} ({first.get('eval_problems', 0)} problems; 95 % CI)")
    for ax, (_, title) in zip(axes[1:], DIAGNOSTICS):
        ax.set_title(f"{title} (mean of {SMOOTH})")
        if not ax.lines:
            ax.text(0.5, 0.5, "not logged (e.g. KL with beta 0)", ha="center", transform=ax.transAxes)
    axes[8].set_title("distinct training problems seen")
    for ax in axes:
        ax.set_xlabel("GRPO step")
    if axes[0].lines:
        axes[0].legend()
    return save_figure(fig, out_png, dpi=90)


def find_runs(paths: list) -> list:
    """The run folders among `paths` and their sub-folders (one level): those whose metrics.jsonl has a GRPO step;
    an SFT-only run (no curve) is left out."""
    dirs = []
    for p in map(Path, paths):
        for d in [p] + (sorted(x for x in p.iterdir() if x.is_dir()) if p.is_dir() else []):
            if any(m.get("phase") == "grpo" for m in read_jsonl(d / "metrics.jsonl")):
                dirs.append(d)
    return dirs


def render(paths: list, out: Path | None = None) -> str:
    """curves.png and curves.md of the runs found in `paths` into `out` (default: the first path); returns the
    table and where the files went. Raises SystemExit with one line when no run has a GRPO step."""
    dirs = find_runs(paths)
    if not dirs:
        raise SystemExit(f"error: no run with GRPO steps in {', '.join(map(str, paths))}")
    out = Path(out or paths[0])
    out.mkdir(parents=True, exist_ok=True)
    runs = [load_run(d) for d in dirs]
    md = markdown(runs)
    write_text_atomic(out / "curves.md", md + "\n")
    return md + "\n\n" + plot(runs, out / "curves.png") + f"\nwrote {out / 'curves.md'}"


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("runs", nargs="+", help="run folders, or folders that hold run folders (e.g. runs/learn)")
    ap.add_argument("--out", help="where curves.png and curves.md go (default: the first folder)")
    a = ap.parse_args()
    print(render(a.runs, a.out))
    sys.exit(0)
