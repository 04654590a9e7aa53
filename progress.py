"""What a run shows: greedy pass@1 on held-out problems during training, the --profile table, and
the summary line a run ends with, and the clock that times a step's phases (train.py calls these;
metrics.jsonl holds every number)."""
import json
import time
from contextlib import contextmanager
from pathlib import Path
from types import SimpleNamespace

import torch

import checkpoint
import eval as evaluation

PHASES = ["retrieval_generation", "plan_generation", "code_generation", "repair_generation", "sandbox", "old_logprobs", "reference_logprobs",
          "policy_forward_backward", "optimizer"]  # the --profile table's rows, in step order


class Clock:
    """Seconds spent per phase of a step (`--profile`, metrics `time_<phase>_s`).

    On CUDA it synchronises before reading the time, so a phase is charged for its own kernels.
    """

    def __init__(self, device):
        self.cuda, self.s = torch.device(device).type == "cuda", {}

    @contextmanager
    def __call__(self, phase: str):
        if self.cuda:
            torch.cuda.synchronize()
        t = time.perf_counter()
        yield
        if self.cuda:
            torch.cuda.synchronize()
        self.s[phase] = self.s.get(phase, 0.0) + time.perf_counter() - t


def print_profile(rows: list):
    """The --profile table: mean seconds per GRPO step of each phase, and what they add up to."""
    phases = [f"time_{p}_s" for p in PHASES if any(f"time_{p}_s" in m for m in rows)]
    step = sum(m["time_step_s"] for m in rows) / len(rows)
    print(f"\nprofile: mean over {len(rows)} GRPO steps\n{'phase':26} {'s/step':>8} {'share':>7}")
    total = 0.0
    for k in phases:
        v = sum(m.get(k, 0.0) for m in rows) / len(rows)
        total += v
        print(f"{k[5:-2]:26} {v:8.2f} {100 * v / step:6.1f}%")
    print(f"{'sum of phases':26} {total:8.2f} {100 * total / step:6.1f}%\n{'step wall time':26} {step:8.2f} {100.0:6.1f}%")


def evaluate(policy, tok, problems, args) -> dict:
    """Greedy pass@1 of the policy on held-out problems (eval.py's generate_programs and score):
    the mode of the run's chain (eval.mode_of: plan for a two-role run, direct for --roles coder). Its own randomness: the RNG states
    are put back afterwards, so a run with evaluation trains exactly as one without.
    Returns {eval_pass@1, eval_problems, eval_plan_tokens (None for direct), eval_code_tokens
    (means over rows), eval_verdicts {verdict: count}, eval_s (seconds)}."""
    ns = SimpleNamespace(n=1, temperature=0.0, batch_size=16, max_plan_tokens=args.max_plan_tokens,
                         max_code_tokens=args.max_code_tokens, sandbox_timeout=args.sandbox_timeout,
                         workers=args.workers, max_retrieval_tokens=args.max_retrieval_tokens)
    chain = [r for r in args.roles if not (r == "retriever" and getattr(args, "retrieval", "recall") == "corpus")]
    saved, t = checkpoint.rng_state(), time.perf_counter()
    try:  # the run's own framework (eval.MODES), with its trained adapters
        programs, stats = evaluation.generate_programs(policy, tok, problems, evaluation.mode_of(chain), ns,
                                                       {r: r for r in chain})
        res = evaluation.score(problems, programs, [1], ns)
    finally:
        checkpoint.set_rng_state(saved)
    # every stat generate_programs reports (mean plan / code tokens, share of truncated codes) goes
    # into the line as eval_<name>
    return {"eval_pass@1": res["pass@1"], "eval_problems": len(problems), **{f"eval_{k}": v for k, v in stats.items()},
            "eval_verdicts": res["verdicts"], "eval_s": time.perf_counter() - t}


def summary(run_dir: Path, wall_s: float) -> str:
    """The run's last line: steps, wall time, first and last reward, last eval pass@1."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [m for m in lines if m.get("phase") == "grpo"]
    evals = [m for m in lines if m.get("phase") == "eval"]
    grpo_s = sum(m.get("time_step_s", 0.0) for m in steps)
    out = f"done: {len(steps)} GRPO steps ({grpo_s:.0f} s of steps, {wall_s:.0f} s in all: loading, SFT, evaluation)"
    if steps:
        out += f", reward {steps[0]['reward']:.3f} (step 1) -> {steps[-1]['reward']:.3f} (step {steps[-1]['step']})"
    if evals:
        out += f", eval pass@1 {evals[-1]['eval_pass@1']:.3f} (step {evals[-1]['step']})"
    return out + f"; adapters, metrics and curves in {run_dir}"
