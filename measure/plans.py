"""The Planner's own signal over a CoRe-Code run: does its credit move the plans toward better Coder results, or
do the plans drift? One Markdown table, a row per window of GRPO steps, from what train.py logs.

    python -m measure.plans runs/learn-synth/core                 # -> runs/learn-synth/core/plans.md
    python -m measure.plans runs/learn-synth/core --window 30

Per window, from metrics.jsonl (the mean over its steps):
  plan tokens         the sampled plans' mean length
  entropy proxy       the Planner's mean -log pi of its sampled tokens (nats/token): it grows as the plans spread out
  plan-reward spread  plan_reward_std, the spread of the plans' credits within a problem: the signal the Planner
                      learns from (grpo.planner_advantages). Each credit is a mean over the plan's few programs, so
                      the spread is partly the Coder's sampling noise; and with 2 plans a problem any spread at all
                      normalises to advantages of about +1 and -1
  no spread           frac_zero_std_planner: the share of problems whose plans all got the same credit (no signal)
Per window, from samples.jsonl (the first plan and program of each problem of each step):
  short plans         the plans with fewer steps than the problem's reference plan (its record's 'plan', in the
                      run's --train-data), of those logged; a step is a numbered line, the closing "Return ..." not
                      counted on either side
  passed              the share of those plans' programs that passed, and of the other plans' programs: a Coder
                      that ignores the plan passes as often after a short plan as after a whole one
"""
import argparse
import json
import re
import sys
from pathlib import Path

import data
from measure.curves import read_jsonl
from measure.report import write_text_atomic

STEP = re.compile(r"^\s*\d+[.)]\s*(.*)$", re.M)  # a numbered line of a plan: "1. Keep the even numbers."


def plan_steps(plan: str) -> int:
    """The numbered steps of a plan, its closing "Return ..." step not counted.

    >>> plan_steps("1. Keep the even numbers.\\n2. Square them.\\n3. Return the result.")
    2
    >>> plan_steps("1. 1. 1. 1."), plan_steps("Just sort it.")
    (1, 0)
    """
    return sum(1 for s in STEP.findall(plan) if not s.strip().lower().startswith("return"))


def mean(values: list) -> float | None:
    values = [v for v in values if isinstance(v, (int, float))]
    return sum(values) / len(values) if values else None


def windows(run_dir: Path, window: int) -> list[dict]:
    """[{first, last, plan_tokens, entropy, spread, no_spread, short, logged, passed_short, passed_rest}] per
    window of `window` GRPO steps (first..last, 1-based; shares as fractions, None where nothing was logged)."""
    run_dir = Path(run_dir)
    steps = [m for m in read_jsonl(run_dir / "metrics.jsonl") if m.get("phase") == "grpo"]
    config = json.loads((run_dir / "config.json").read_text())
    reference = {p.task_id: plan_steps(p.plan) for p in data.load(config["train_data"]) if p.plan}
    samples = [s for s in read_jsonl(run_dir / "samples.jsonl") if s.get("task_id") in reference and isinstance(s.get("plan"), str)]
    out, last = [], max((m["step"] for m in steps), default=0)
    for first in range(1, last + 1, window):
        w = [m for m in steps if first <= m["step"] < first + window]
        short, rest = [], []
        for s in samples:
            if first <= s["step"] < first + window:
                (short if plan_steps(s["plan"]) < reference[s["task_id"]] else rest).append(s)
        passed = lambda ss: mean([s["verdict"] == "passed" for s in ss])  # noqa: E731
        out.append({"first": first, "last": min(first + window - 1, last),
                    **{k: mean([m.get(key) for m in w]) for k, key in [
                        ("plan_tokens", "plan_tokens"), ("entropy", "neg_logp_planner"),
                        ("spread", "plan_reward_std"), ("no_spread", "frac_zero_std_planner")]},
                    "short": len(short), "logged": len(short) + len(rest), "passed_short": passed(short), "passed_rest": passed(rest)})
    return out


def table(rows: list[dict]) -> str:
    """The Markdown table of windows()."""
    f = lambda v, fmt: "–" if v is None else format(v, fmt)  # noqa: E731
    lines = ["| steps | plan tokens | entropy proxy (nats/token) | plan-reward spread | no spread % | short plans "
             "| passed % after short / other plans |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['first']}-{r['last']} | {f(r['plan_tokens'], '.1f')} | {f(r['entropy'], '.3f')} | "
                     f"{f(r['spread'], '.3f')} | {f(r['no_spread'] and 100 * r['no_spread'], '.0f')} | "
                     f"{r['short']} of {r['logged']} | {f(r['passed_short'] and 100 * r['passed_short'], '.0f')} / "
                     f"{f(r['passed_rest'] and 100 * r['passed_rest'], '.0f')} |")
    return "\n".join(lines)


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("run", help="a train.py run folder with the Planner among its roles")
    ap.add_argument("--window", type=int, default=30, help="GRPO steps a row")
    ap.add_argument("--out", help="the table's file (default: <run>/plans.md)")
    a = ap.parse_args()
    if not (Path(a.run) / "config.json").exists():
        sys.exit(f"measure.plans: no train.py run at {a.run} (no config.json)")
    text = table(windows(Path(a.run), a.window))
    write_text_atomic(Path(a.out or Path(a.run) / "plans.md"), text + "\n")
    print(text)
