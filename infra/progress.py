"""What a run shows: one progress bar per stage with the whole run's ETA and, at the start, a line that says
what will run and roughly how long it takes here (the evaluations during training counted: eval.held_out), the
--profile table, the summary line a run ends with, and the clock that times a step's phases (train.py and
sft.py call these; metrics.jsonl holds every number)."""
import json
import resource
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import torch
from tqdm import tqdm

from infra import checkpoint

PHASES = ["retrieval_generation", "plan_generation", "code_generation", "repair_generation", "sandbox", "old_logprobs", "reference_logprobs",
          "policy_forward_backward", "optimizer"]  # the --profile table's rows, in step order


def peak_rss_gib() -> float:
    """This process's peak resident memory so far, GiB (getrusage's ru_maxrss: KiB on Linux, bytes on macOS);
    the sandbox's children are not in it (they have their own budget, --sandbox-memory)."""
    kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return kib / (2**30 if sys.platform == "darwin" else 2**20)


class Clock:
    """Seconds spent per phase of a step (`--profile`, metrics `time_<phase>_s`).

    sync (--profile) on CUDA: wait for the device before reading the time, so that a phase is charged for its own
    kernels. Without it nothing waits (a wait per micro-batch would stall the GPU's queue): a phase's seconds are
    then the host's, and kernels it queued may be charged to a later phase; the step's total is right either
    way (the step ends by reading its loss, which waits for every kernel).
    """

    def __init__(self, device, sync: bool = False):
        self.sync, self.s = sync and torch.device(device).type == "cuda", {}

    @contextmanager
    def __call__(self, phase: str):
        if self.sync:
            torch.cuda.synchronize()
        t = time.perf_counter()
        yield
        if self.sync:
            torch.cuda.synchronize()
        self.s[phase] = self.s.get(phase, 0.0) + time.perf_counter() - t


# Seconds per unit of each stage, embedded SmolLM2-135M at the defaults, float32, 2 torch threads on a 2-core
# AMD EPYC (AVX-512): the first guess of a run's length, which the run's own timed steps then correct.
# Units: load once; an SFT step (--sft-batch 8); a GRPO step (2 problems x 2 plans x 4 codes, 48 + 128
# tokens); one held-out problem evaluated. Sources: `make train` on an idle machine, 2026-12-04 05:32 UTC
# (docs/running.md): load 3-5 s with the model converted (34 s the first time), SFT steps 5.9 s (Planner) and
# 7.3 s (Coder), GRPO 20.4 s a step (medians); evaluation: a rough guess, not measured. Other models and
# devices get no guess (the ETA comes from their own steps).
COSTS = {"load": 5.0, "sft planner": 5.9, "sft coder": 7.3, "sft debugger": 7.3, "grpo": 20.4, "eval": 10.0}


class Stages:
    """The stages of a run in order, each with its units (steps, or problems for 'eval'), the units done, the
    guessed seconds per unit (COSTS, scaled; None: no guess) and the units timed in this process with their
    seconds. The ETA of what is left: a stage with timed units at its own measured rate; one not timed yet at
    its guess times the ratio of measured to guessed seconds over everything timed (this machine today)."""

    def __init__(self, stages: list, show: bool = True, caps: dict | None = None):
        """stages: (name, units, guess) or (name, units, guess, units done before: a resumed run)."""
        self.stages = {name: {"units": u, "done": (d or [0])[0], "timed": 0, "seconds": 0.0, "guess": g}
                       for name, u, g, *d in stages}
        self.caps = caps or {}  # stage -> the most seconds it may take (GRPO under --time-budget)
        self.show, self.t0, self.open = show, time.perf_counter(), None

    def stage(self, name: str) -> dict:
        return self.stages.setdefault(name, {"units": 0, "done": 0, "timed": 0, "seconds": 0.0, "guess": None})

    def record(self, name: str, seconds: float, units: float = 1) -> None:
        st = self.stage(name)
        st["done"], st["timed"], st["seconds"] = st["done"] + units, st["timed"] + units, st["seconds"] + seconds

    def eta_s(self) -> float | None:
        """Seconds left (None: a stage left with neither a guess nor a timed unit)."""
        timed = [st for st in self.stages.values() if st["timed"] and st["guess"]]
        speed = sum(st["seconds"] for st in timed) / sum(st["timed"] * st["guess"] for st in timed) if timed else 1.0
        left = 0.0
        for name, st in self.stages.items():
            rest, cap = max(0, st["units"] - st["done"]), self.caps.get(name)
            if rest and st["timed"]:
                need = rest * st["seconds"] / st["timed"]
            elif rest and st["guess"] is None and cap is None:
                return None
            elif rest:
                need = rest * st["guess"] * speed if st["guess"] is not None else float("inf")
            else:
                need = 0.0
            left += need if cap is None else min(need, max(0.0, cap - st["seconds"]))  # the budget ends it sooner
        return left

    def plan_line(self) -> str:
        def count(n, word):
            return f" {n:g} {word}{'' if n == 1 else 's'}"
        parts = [name + ("" if name == "load" else (" up to" if name in self.caps else "")
                         + count(st["units"] - st["done"], "problem" if name == "eval" else "step"))
                 + (f" ~{clock(min((st['units'] - st['done']) * st['guess'], self.caps.get(name, float('inf'))))}"
                    if st["guess"] is not None else f" at most {clock(self.caps[name])}" if name in self.caps else "")
                 for name, st in self.stages.items() if st["units"] > st["done"]]
        eta = self.eta_s()
        total = (f"about {clock(eta)} in all on a 2-core CPU (progress.COSTS)" if eta is not None
                 else "no time guess for this model or device before its first steps")
        return "will run: " + ", ".join(parts) + f"; {total}; the bars' ETA corrects it as steps are timed"


STAGES: Stages | None = None  # the run in progress (start), for the bars of sft.py and train.py


def clock(s: float | None) -> str:
    """Seconds -> 'm:ss' ('?' for None)."""
    return "?" if s is None else f"{int(s) // 60}:{int(s) % 60:02d}"


def evaluations(steps: int, every: int) -> int:
    """How many times train.py evaluates: at step 0, every `every` steps, and after the last step."""
    if steps <= 0:
        return 1
    return 1 + (steps // every + (steps % every != 0) if every > 0 else 1)


def start(args, device: str, eval_problems: int, show: bool = True, state: dict | None = None) -> Stages:
    """The run's stages from its flags (load, SFT per role, evaluations, GRPO steps), printed as one line.
    Guesses (COSTS) only for the embedded model in float32 on a CPU; the GRPO guess scales with the step's
    tokens (problems x (plans x plan tokens + codes x code tokens)), SFT's with --sft-batch. state: a
    resumed run's checkpoint state (checkpoint.state_of): what it had done counts as done, so the line and
    the ETA are of what is left."""
    import roles

    guess = args.model in ("SmolLM2-135M-Instruct", "HuggingFaceTB/SmolLM2-135M-Instruct") and device == "cpu" \
        and getattr(args, "dtype", "auto") in ("auto", "float32")
    g = (lambda s: s) if guess else (lambda s: None)  # noqa: E731
    codes = args.codes_per_plan or 4
    plans = args.num_plans if "planner" in args.roles else 0
    tokens = args.problems_per_step * (plans * args.max_plan_tokens + args.num_plans * codes * args.max_code_tokens)
    state = state or checkpoint.fresh_state()
    sft_roles = roles.sft_roles(args.roles) if args.sft_steps > 0 else []
    next_role = next((r for r in sft_roles if r not in state["sft_done"]), None)  # the role a resume goes on with
    step = state["step"]
    evals_done = (1 + (step // args.eval_every if args.eval_every > 0 else 0)) if step else 0
    stages = [("load", 1, g(COSTS["load"]))]
    stages += [(f"sft {r}", args.sft_steps, g(COSTS.get(f"sft {r}", COSTS["sft coder"]) * args.sft_batch / 8),
                args.sft_steps if r in state["sft_done"] else state.get("sft_step", 0) if r == next_role else 0)
               for r in sft_roles]
    stages += [("eval", evaluations(args.steps, args.eval_every) * eval_problems,
                g(COSTS["eval"] * args.max_code_tokens / 128), evals_done * eval_problems)]
    stages += [("grpo", args.steps, g(COSTS["grpo"] * tokens / (2 * (2 * 48 + 2 * 4 * 128))), step)]
    global STAGES
    budget = getattr(args, "time_budget", None)
    STAGES = Stages(stages, show, {"grpo": max(0.0, 60 * budget - state.get("grpo_s", 0.0))} if budget else None)  # minutes
    if show:
        print(STAGES.plan_line(), flush=True)
    return STAGES


def bar(iterable, name: str, total: int | None = None, initial: int = 0, disable: bool = False):
    """tqdm over `iterable` as stage `name` of the run (start): each item's seconds go into the run's ETA,
    shown after the bar with the stage's s/step. The bar is closed while an evaluation runs (pause), so the
    evaluation's own bar is never drawn inside it; after it the stage goes on in a new bar below, which counts
    the step just done. A caller that stops after an item (train.py breaks after its last step, evaluated)
    gets that step counted too when an evaluation ended it, so the run ends on N/N."""
    run = STAGES
    if run is None:
        yield from tqdm(iterable, desc=name, total=total, initial=initial, disable=disable, dynamic_ncols=True)
        return
    if run.stages["load"]["done"] == 0:  # everything before the first bar is loading
        run.record("load", time.perf_counter() - run.t0)
    st = run.stage(name)
    st["done"] = max(st["done"], initial)  # --resume: steps done before
    total = len(iterable) if total is None else total
    count, b = initial, None

    def opened():  # the stage's bar at `count` steps; its s/step and the run's ETA follow it (tqdm's own rate left out)
        return tqdm(desc=name, total=total, initial=count, disable=disable, dynamic_ncols=True,
                    bar_format="{l_bar}{bar}| {n_fmt}/{total_fmt} [{elapsed}{postfix}]")

    def done(b, t, evaluating):
        """Step count + 1 is done: its seconds (an evaluation's excluded: they are its own) into the ETA, and the
        bar moved on; a bar an evaluation closed during the step (pause) goes on as a new one below it."""
        run.record(name, time.perf_counter() - t - (run.stage("eval")["seconds"] - evaluating))
        if run.open is not b:
            b = run.open = opened()
        b.set_postfix_str(f"{st['seconds'] / st['timed']:.1f} s/step, run ETA {clock(run.eta_s())}", refresh=False)
        b.update(1)
        return b

    try:
        for item in iterable:
            if b is None:
                b = run.open = opened()
            t, evaluating = time.perf_counter(), run.stage("eval")["seconds"]
            try:
                yield item
            except GeneratorExit:  # the caller stopped: count the step if an evaluation ended it
                if run.open is not b:
                    done(b, t, evaluating)
                raise
            b = done(b, t, evaluating)
            count += 1
    finally:
        pause()


def pause() -> None:
    """Close the open stage bar (its line stays); the stage's next step opens a new one."""
    if STAGES is not None and STAGES.open is not None:
        STAGES.open.close()
        STAGES.open = None


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


def record_eval(seconds: float, problems: int) -> None:
    """An evaluation's seconds into the run's ETA (its own stage, 'eval'); train.py calls it after eval.held_out."""
    if STAGES is not None:
        STAGES.record("eval", seconds, problems)


def summary(run_dir: Path, wall_s: float) -> str:
    """The run's last line: steps, wall time, first and last reward, first and last eval pass@1."""
    lines = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines() if x.strip()]
    steps = [m for m in lines if m.get("phase") == "grpo"]
    evals = [m for m in lines if m.get("phase") == "eval"]
    grpo_s = sum(m.get("time_step_s", 0.0) for m in steps)
    out = f"done: {len(steps)} GRPO steps ({grpo_s:.0f} s of steps, {wall_s:.0f} s in all: loading, SFT, evaluation)"
    if steps:
        out += f", reward {steps[0]['reward']:.3f} (step 1) -> {steps[-1]['reward']:.3f} (step {steps[-1]['step']})"
    if evals:  # the first (step 0: before training) and the last
        first, last = evals[0], evals[-1]
        before = f"{first['eval_pass@1']:.3f} (step {first['step']}) -> " if len(evals) > 1 else ""
        out += f", eval pass@1 {before}{last['eval_pass@1']:.3f} (step {last['step']})"
    return out + f"; adapters, metrics and curves in {run_dir}"
