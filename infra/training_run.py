"""A training run around its steps (train.py's stages run inside it): what they share, how it starts, its
logs, its checkpoints, a Ctrl-C's safe stop, the checks that stop a run that cannot learn, its end.

    run = TrainingRun.setup(args, final_args)   device, torchrun, the run folder and --resume's checkpoint,
                                                seeds, problems, a sandbox that isolates
    log = run.open_log()                        config.json, the first line, metrics.jsonl / samples.jsonl
    run.save(name)                              a checkpoint (every rank's RNG state in it)
    run.stopping(), run.stop_here(...)          a signal reached some rank: save, say how to resume, stop
    Health().check(run, step, metrics, samples) a TrainingError when the sandbox or the loss is broken
    run.finish(rows, report.plot_curves)        adapters/, the --profile table, curves.png, the summary line
"""
import random
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import data
import sandbox
from fast import fixed_decode
from infra import checkpoint, distributed, interrupt, models, progress, trackers
from sandboxing import checkers


class TrainingError(RuntimeError):
    """Training cannot go on (e.g. three non-finite steps in a row); the message is one line."""


@dataclass
class TrainingRun:
    """What the stages of a run share (`setup` makes it, train.load_policy adds the policy): the flags, this
    process's place under torchrun, the run folder and its checkpoint state, the problems, the policy."""
    args: object
    rank: int  # 0 without torchrun; rank 0 writes every file
    world: int  # processes
    device: str
    quant: str
    dir: Path  # runs/<time>/
    ckpt: Path | None  # the checkpoint --resume goes on from (None: a fresh run)
    state: dict  # step, problems consumed, SFT roles done, seconds (checkpoint.fresh_state)
    problems: list = field(default_factory=list)
    eval_problems: list = field(default_factory=list)
    isolation: str = ""  # what the sandbox isolates with (config.json)
    policy: object = None  # the base with one LoRA adapter per role (models.add_role_adapters)
    tok: object = None
    optimizer: torch.optim.Optimizer | None = None  # AdamW on every role's LoRA weights
    lora: list = field(default_factory=list)  # those weights
    corpus: object = None  # retriever.Corpus for --retrieval corpus
    finished: bool = False  # --resume of a run that had reached its last step: nothing to do
    t_start: float = field(default_factory=time.perf_counter)
    stop: interrupt.Stop | None = None  # Ctrl-C / SIGTERM: set, the run stops at its next safe point (stopping)

    @property
    def main_rank(self) -> bool:
        return self.rank == 0

    @classmethod
    def setup(cls, args, final_args) -> "TrainingRun":
        """Device and torchrun, the run folder and its latest checkpoint (--resume), the seeds, the problems,
        and a sandbox that isolates and tells right from wrong (else a one-line SystemExit). final_args: the
        flags of the run's last step (release.sequential.final_args), what a --resume is compared with and
        the ETA counts to. Raises TrainingError when the batch does not split over the processes."""
        device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
        quant = models.default_quant(device) if args.quant == "auto" else args.quant
        rank, world, device = distributed.setup(device)  # (0, 1, device) without torchrun
        fixed_decode.GRAPH = args.cuda_graph  # the sampler on CUDA: its token step as one CUDA graph
        if args.problems_per_step % world:
            raise TrainingError(f"--problems-per-step {args.problems_per_step} does not split over {world} processes")
        run_dir = Path(args.out or distributed.gather(f"runs/{time.strftime('%Y%m%d-%H%M%S')}")[0])
        run = cls(args, rank, world, device, quant, run_dir, checkpoint.latest(run_dir) if args.resume else None,
                  checkpoint.fresh_state())
        run.finished = bool(run.ckpt) and checkpoint.finished(final_args, run_dir, run.ckpt, run.main_rank)
        if run.finished:
            return run
        random.seed(args.seed)
        torch.manual_seed(args.seed)  # the same on every rank: the same initial LoRA weights
        run.problems = checkers.use(data.load(args.train_data), args.checker)  # --checker: one rule for every set
        held_out = data.load(args.eval_data)[:args.eval_limit] if args.eval_data else []
        run.eval_problems = checkers.use(held_out, args.checker)
        progress.start(final_args, device, len(run.eval_problems) * args.eval_samples, show=run.main_rank,  # what will run (is
                       state=checkpoint.state_of(run.ckpt) if run.ckpt else None)  # left), and how long
        try:
            run.isolation = sandbox.require(args.unsafe_sandbox, show=run.main_rank,  # refuses when nothing isolates
                                            memory_mb=args.sandbox_memory)
            sandbox.self_check()  # a sandbox that cannot tell right from wrong must not be a reward
        except (RuntimeError, sandbox.SandboxError) as e:
            raise SystemExit(f"error: {e}") from None
        return run

    def open_log(self) -> trackers.RunLog:
        """Rank 0: config.json (checkpoint.prepare: the logs cut back to the checkpoint), the run's first line,
        and its logs (metrics.jsonl, samples.jsonl, the --report-to tracker); other ranks log nowhere."""
        args, dtype = self.args, models.choose_dtype(self.device, self.args.dtype)  # what auto chose here
        config = {**vars(args), "device": self.device, "quant": self.quant, "dtype": dtype, "sandbox": self.isolation}
        if self.main_rank:
            checkpoint.prepare(self.dir, config, self.ckpt, self.state)
            print(f"run folder {self.dir}  model {args.model}  device {self.device}  quant {self.quant}  dtype {dtype}  "
                  f"processes {self.world}  problems {len(self.problems)}  trainable LoRA params "
                  f"{sum(p.numel() for p in self.lora):,}" + (f"\nresumed from {self.ckpt} (step {self.state['step']})"
                  if self.ckpt else f"\n{self.dir} has no checkpoint yet: starting it over" if args.resume else ""))
        return trackers.RunLog(self.dir, config, write=self.main_rank)

    def save(self, name: str) -> None:
        """A checkpoint (checkpoint.save) with every rank's RNG state; rank 0 writes it."""
        rngs = distributed.gather(checkpoint.rng_state())
        if self.main_rank:
            state = {**self.state, "wall_s": self.state["wall_s"] + time.perf_counter() - self.t_start}
            checkpoint.save(self.dir, name, self.policy, self.optimizer, state, rngs, self.args.keep_checkpoints)

    def stopping(self) -> bool:
        """True when a Ctrl-C / SIGTERM reached any process of the run (a collective under torchrun: every rank
        stops at the same safe point)."""
        return any(distributed.gather(self.stop is not None and self.stop.requested))

    def stop_here(self, name: str | None, where: str) -> None:
        """A safe point after a signal: checkpoint `name` (None: the one just saved), then interrupt.Interrupted
        with the line that says what is kept and the command that resumes."""
        if name:
            self.save(name)
        signum = max(s or 0 for s in distributed.gather(self.stop.signum))  # the signal some rank got
        raise interrupt.Interrupted(signum, f"checkpoint after {where} saved in {self.dir / 'checkpoints'}",
                                    f"python train.py --resume {self.dir}")

    def finish(self, rows: list, plot_curves) -> None:
        """Rank 0 at the end: the adapters (adapters/<role>/), the --profile table, curves.png and the
        summary line. rows: the run's metrics lines (trackers.RunLog.rows); plot_curves(run dirs, png) -> the
        line to print (report.plot_curves, handed in by train.py: infra sits below measure/)."""
        checkpoint.save_adapters(self.policy, self.dir)
        if self.args.profile and rows:
            progress.print_profile(rows)
        print(plot_curves([self.dir], self.dir / "curves.png"))
        print(progress.summary(self.dir, self.state["wall_s"] + time.perf_counter() - self.t_start))


class Health:
    """Stops a run that cannot learn, with a one-line TrainingError: two steps in a row in which the
    sandbox judged no program (rewards of 0 teach nothing: stopped at a checkpoint), three in a row whose
    optimizer step was skipped for a non-finite loss or gradient norm (a diverged run: adapters saved)."""

    def __init__(self):
        self.broken, self.bad = 0, 0  # steps in a row

    def check(self, run: TrainingRun, step: int, m: dict, samples: list) -> None:
        self.broken = self.broken + 1 if set(m["verdicts"]) == {"sandbox_error"} else 0
        if self.broken == 2:
            run.save(f"step-{step:06d}")
            raise TrainingError(f"steps {step - 1}-{step}: the sandbox failed on every program "
                                f"({samples[0]['detail'] if samples else 'no detail'}); stopped at a checkpoint, "
                                f"--resume {run.dir} once it works (python -c 'import sandbox; sandbox.self_check()')")
        self.bad = self.bad + 1 if m["skipped_updates"] else 0
        if self.bad == 3:
            if run.main_rank:
                checkpoint.save_adapters(run.policy, run.dir)
            raise TrainingError(f"steps {step - 2}-{step} all had a non-finite loss or gradient norm; "
                                f"stopped, adapters saved in {run.dir / 'adapters'} (try a lower --lr)")
