"""Does the loop learn what it trains on? The "overfit one batch" check, on a fixed pool of training problems.

    python bench/overfit.py                     # select the pool, train both arms side by side, print the table
    python bench/overfit.py --table             # the table of the runs already in --out (while they run, too)
    make overfit                                # the same as the first line

1. The pool: the first --candidates problems of synth:train at depth 1 and at depth 2 (data/synth.py), each sampled
   --samples times by the base model (eval.py, direct, the rollout temperature); the first --pool of them whose
   sampled pass rate is strictly between 0 and 1 (a problem always or never solved gives a group no spread:
   nothing to learn from) are written to <out>/pool.jsonl.
2. Two arms from the same base (no SFT), each a train.py run with the pool as both its training and its
   evaluation set: the single agent (--roles coder: 8 programs a problem) and CoRe-Code (--roles planner,coder:
   4 plans x 2 programs), --problems-per-step problems a step, so that each problem is seen steps x per-step /
   pool times (--epochs). Side by side with one CPU thread each; each resumes where it stopped.
3. The table: per evaluated step, the pool's sampled pass@1 (--samples programs a problem at the rollout
   temperature, eval.held_out) with its 95 % interval and the paired-bootstrap p against step 0 (measure/curves.py),
   the mean training reward since the last evaluation, the share of Coder groups with no spread, and for
   CoRe-Code the Planner's own signal: the spread of the plans' mean rewards within a problem (plan_reward_std)
   and the share of Planner groups with none.
The pass@1 at step 0 is measured afresh, not taken from the selection (whose samples chose the pool: a pass rate
selected to lie in (0, 1) is biased toward the middle).
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from measure import curves  # noqa: E402

ARMS = {"coder": ["--roles", "coder", "--num-plans", "4", "--codes-per-plan", "2"],  # 8 programs a problem
        "core": ["--roles", "planner,coder", "--num-plans", "4", "--codes-per-plan", "2"]}  # 4 plans x 2 programs


def select_pool(args, out: Path) -> Path:
    """Step 1: <out>/pool.jsonl (kept when it exists: a rerun trains on the same pool)."""
    pool = out / "pool.jsonl"
    if pool.exists():
        return pool
    import data

    names = f"synth:train@1#{args.candidates},synth:train@2#{args.candidates}"
    candidates = data.load(names)
    chosen = out / "selection.json"
    if not chosen.exists():
        subprocess.run([sys.executable, "eval.py", "--dataset", names, "--modes",
                        "direct", "--n", str(args.samples), "--temperature", str(args.temperature), "--max-code-tokens",
                        str(args.max_code_tokens), "--no-cache", "--out", str(chosen)], cwd=ROOT, check=True)
    results = json.loads(chosen.read_text())["results"]  # one entry a set of the comma list
    rows = [r for by_system in results.values() for r in by_system["base direct"]["problems"]]
    rate = {r["task_id"]: r["passed"] / len(r["verdicts"]) for r in rows}
    keep = [p for p in candidates if 0 < rate[p.task_id] < 1][:args.pool]
    if len(keep) < 2:
        sys.exit(f"error: only {len(keep)} of {len(candidates)} candidates have a pass rate in (0, 1): raise --candidates")
    pool.write_text("".join(json.dumps(data.to_record(p)) + "\n" for p in keep))
    print(f"pool: {len(keep)} problems, selection pass rates " + ", ".join(f"{rate[p.task_id]:.2f}" for p in keep))
    return pool


def train_arms(args, out: Path, pool: Path) -> None:
    """Step 2: every arm of --arms as its own train.py process, side by side, one CPU thread each."""
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    procs = []
    for arm in args.arms.split(","):
        run = out / arm
        if (run / "config.json").exists():
            cmd = ["--resume", str(run)]
        else:
            cmd = [*ARMS[arm], "--sft-steps", "0", "--train-data", str(pool), "--eval-data", str(pool),
                   "--eval-samples", str(args.samples), "--eval-every", str(args.eval_every), "--steps", str(args.steps),
                   "--problems-per-step", str(args.problems_per_step), "--lr", str(args.lr), "--temperature",
                   str(args.temperature), "--max-code-tokens", str(args.max_code_tokens), "--max-plan-tokens",
                   str(args.max_plan_tokens), "--workers", "1", "--save-every", str(args.eval_every), "--out", str(run)]
        log = open(out / f"{arm}.log", "a")
        procs.append((arm, subprocess.Popen([sys.executable, "train.py", *cmd], cwd=ROOT, env=env, stdout=log,
                                            stderr=subprocess.STDOUT)))
    for arm, p in procs:
        if p.wait():
            sys.exit(f"error: arm {arm} stopped (exit {p.returncode}); see {out / f'{arm}.log'}; run again to resume")


def mean(rows: list, key: str) -> str:
    values = [m[key] for m in rows if m.get(key) is not None]
    return f"{sum(values) / len(values):.3f}" if values else ""


def table(out: Path) -> str:
    """Step 3: one Markdown table of every arm's evaluated steps."""
    lines = ["| arm | step | epochs | pool pass@1 % [95 % CI] | p vs step 0 | reward (steps since) | zero-std coder | "
             "plan reward spread | zero-std planner |", "|---|---|---|---|---|---|---|---|---|"]
    pool = sum(1 for _ in open(out / "pool.jsonl"))  # problems in the pool
    for arm in ARMS:
        if not (out / arm / "metrics.jsonl").exists():
            continue
        run = curves.load_run(out / arm)
        per = run["config"]["problems_per_step"]
        first, last = (run["evals"][0] if run["evals"] else None), 0
        for m in run["evals"]:
            p, step = curves.dev_point(m), m["step"]
            since = [g for g in run["grpo"] if last < g["step"] <= step]
            lines.append(f"| {arm} | {step} | {step * per / pool:.1f} | {100 * p['pass1']:.1f} [{100 * p['lo']:.1f}, "
                         f"{100 * p['hi']:.1f}] | {curves.paired(first, m) if step else ''} | {mean(since, 'reward')} | "
                         f"{mean(since, 'frac_zero_std_coder')} | {mean(since, 'plan_reward_std')} | "
                         f"{mean(since, 'frac_zero_std_planner')} |")
            last = step
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", default="runs/overfit")
    ap.add_argument("--arms", default="coder,core", help="comma list of " + ", ".join(ARMS))
    ap.add_argument("--candidates", type=int, default=12, help="candidates per depth (1 and 2) for the pool")
    ap.add_argument("--pool", type=int, default=8, help="problems in the pool")
    ap.add_argument("--samples", type=int, default=8, help="programs a problem when measuring pass@1")
    ap.add_argument("--steps", type=int, default=40, help="GRPO steps of each arm")
    ap.add_argument("--problems-per-step", type=int, default=2)
    ap.add_argument("--eval-every", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--temperature", type=float, default=0.7, help="the rollouts' and the measurement's")
    ap.add_argument("--max-code-tokens", type=int, default=96)
    ap.add_argument("--max-plan-tokens", type=int, default=48)
    ap.add_argument("--table", action="store_true", help="only print the table of the runs in --out")
    args = ap.parse_args()
    if bad := [a for a in args.arms.split(",") if a not in ARMS]:
        sys.exit(f"error: unknown arm {bad[0]} (arms: {', '.join(ARMS)})")
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    if not args.table:
        train_arms(args, out, select_pool(args, out))
    print(table(out))


if __name__ == "__main__":
    main()
