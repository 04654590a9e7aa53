"""Signal per second of compute for a few group sizes: how many sampled programs teach anything.

    python bench/group_sweep.py --init runs/exp/sft --steps 6          # the four settings below
    python bench/group_sweep.py --init runs/exp/sft --only 2x4 --steps 10

Each setting is a train.py run from the same --init (the same SFT adapters) on the same problems (same
--seed: the same batches), two at a time side by side with one CPU thread each (a ratio measured in one
run, as the project's bench rule asks). A group whose rewards are all equal has zero advantages: its
programs add nothing to the gradient (DAPO, Yu et al. 2025, sec. 3.2 filters such groups for that reason).
The table, per setting:
    s/step         mean wall seconds of a GRPO step (metrics time_step_s)
    zero-std coder  mean frac_zero_std_coder: share of the Coder's groups with all rewards equal
    zero-std plan   the same for the Planner's groups (one group of G plans per problem)
    useful codes/min  (1 - zero-std coder) * programs per step / (s/step / 60): programs with a
                   non-zero advantage per wall minute (our measure of signal per compute)
    reward         mean reward over the steps (a 6-step run cannot show a gain above noise: read it as a check)
"""
import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = {  # name: (G plans, M codes per plan, extra train.py flags)
    "4x2": (4, 2, []),
    "2x4": (2, 4, []),
    "4x4": (4, 4, []),
    "4x2-problem": (4, 2, ["--coder-baseline", "problem"]),
}


def summary(run: Path, programs: int) -> dict:
    """Means over the run's GRPO lines (metrics.jsonl); programs = programs per step (B * G * M)."""
    ms = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    ms = [m for m in ms if m.get("phase") == "grpo"]
    mean = lambda key: sum(m[key] for m in ms) / len(ms)  # noqa: E731
    step_s = mean("time_step_s")
    zc = mean("frac_zero_std_coder")
    return {"steps": len(ms), "s/step": step_s, "zero-std coder": zc, "zero-std plan": mean("frac_zero_std_planner"),
            "useful codes/min": (1 - zc) * programs / (step_s / 60), "reward": mean("reward")}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--init", required=True, help="a train.py run folder (the SFT every setting starts from)")
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--problems-per-step", type=int, default=2)
    ap.add_argument("--only", default=",".join(SETTINGS), help="comma list of " + ", ".join(SETTINGS))
    ap.add_argument("--out", default="runs/group_sweep")
    ap.add_argument("--parallel", type=int, default=2, help="runs side by side (one thread each)")
    args = ap.parse_args()
    names = args.only.split(",")
    if bad := [n for n in names if n not in SETTINGS]:
        sys.exit(f"error: unknown setting {bad[0]} (settings: {', '.join(SETTINGS)})")
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs = {n: out / n for n in names}
    for i in range(0, len(names), args.parallel):
        procs = []
        for n in names[i:i + args.parallel]:
            g, m, extra = SETTINGS[n]
            cmd = [sys.executable, "train.py", "--init", str(Path(args.init).resolve()), "--sft-steps", "0", "--steps", str(args.steps),
                   "--problems-per-step", str(args.problems_per_step), "--num-plans", str(g), "--codes-per-plan",
                   str(m), "--workers", "1", "--save-every", "0", "--overwrite", "--out", str(runs[n]), *extra]
            log = open(out / f"{n}.log", "w")
            procs.append((n, subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)))
        for n, p in procs:
            if p.wait():
                sys.exit(f"error: setting {n} failed (exit {p.returncode}); see {out / f'{n}.log'}")
    cols = ["steps", "s/step", "zero-std coder", "zero-std plan", "useful codes/min", "reward"]
    print("| G x M | " + " | ".join(cols) + " |\n|" + "---|" * (len(cols) + 1))
    for n in names:
        g, m, _ = SETTINGS[n]
        s = summary(runs[n], args.problems_per_step * g * m)
        print(f"| {n} | " + " | ".join(f"{s[c]:.2f}" if isinstance(s[c], float) else str(s[c]) for c in cols) + " |")


if __name__ == "__main__":
    main()
