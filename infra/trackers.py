"""Where a run's numbers go: metrics.jsonl and samples.jsonl always (`RunLog`), and an experiment tracker
(`train.py --report-to tensorboard|wandb|trackio`).

Each tracker's package is imported only when it is chosen, on rank 0 only; a missing one is a
one-line TrackerError. Every numeric value of a metrics line is logged as `<phase>/<key>` at its
GRPO step (eval lines as eval/<key>); counts like verdicts as `<phase>/<key>/<name>`.
"""
import importlib
import json
import os
from pathlib import Path

KINDS = ["none", "tensorboard", "wandb", "trackio"]
PACKAGES = {"tensorboard": "tensorboard", "wandb": "wandb", "trackio": "trackio"}  # pip names


class TrackerError(Exception):
    """A tracker was asked for but cannot start; the message is one line for the user."""


def scalars(m: dict) -> dict:
    """{'phase': 'grpo', 'step': 3, 'reward': 0.5, 'verdicts': {'passed': 2}, 'kl': None}
    -> {'grpo/reward': 0.5, 'grpo/verdicts/passed': 2}: numbers only, None dropped."""
    phase, out = m.get("phase", "grpo"), {}
    for k, v in m.items():
        if isinstance(v, dict):
            out.update({f"{phase}/{k}/{n}": x for n, x in v.items() if isinstance(x, (int, float))})
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and k not in ("step", "sft_step"):
            out[f"{phase}/{k}"] = v
    return out


def _need(kind: str):
    try:
        return importlib.import_module({"tensorboard": "torch.utils.tensorboard"}.get(kind, kind))
    except ImportError:
        raise TrackerError(f"--report-to {kind} needs the {PACKAGES[kind]} package: "
                           f"pip install {PACKAGES[kind]}") from None


class Tracker:
    """log(metrics line) and close() over one of the packages."""

    def __init__(self, kind: str, run_dir: Path, config: dict):
        self.kind, mod = kind, _need(kind)
        if kind == "tensorboard":  # event files in RUN_DIR/tensorboard/
            self.run = mod.SummaryWriter(log_dir=str(Path(run_dir) / "tensorboard"))
        elif kind == "wandb":  # WANDB_MODE=offline works without a network
            self.run = mod.init(project="core-code", name=Path(run_dir).name, dir=str(run_dir), config=config)
        else:  # trackio: wandb-like API, local by default
            self.run = mod.init(project="core-code", name=Path(run_dir).name, config=config)
        self.mod = mod

    def log(self, m: dict):
        step, values = m.get("step", m.get("sft_step", 0)), scalars(m)
        if self.kind == "tensorboard":
            for k, v in values.items():
                self.run.add_scalar(k, v, step)
        elif self.kind == "wandb":
            self.run.log(values, step=step)
        else:
            self.mod.log(values, step=step)

    def close(self):
        if self.kind == "tensorboard":
            self.run.close()
        elif self.kind == "wandb":
            self.run.finish()
        else:
            self.mod.finish()


def make(kind: str, run_dir, config: dict) -> Tracker | None:
    """The tracker --report-to asks for, or None for 'none'. Raises TrackerError (one line)."""
    if kind in (None, "none"):
        return None
    if kind not in KINDS:
        raise TrackerError(f"unknown --report-to '{kind}': use one of {', '.join(KINDS)}")
    return Tracker(kind, run_dir, config)


class RunLog:
    """The run folder's logs, a context manager: metrics.jsonl (one line per SFT / GRPO step / evaluation,
    also sent to the tracker), samples.jsonl (a GRPO step's samples, one line each). write=False (torchrun's
    ranks > 0) writes nowhere. rows: the GRPO steps' lines (train.py's --profile table)."""

    def __init__(self, run_dir: Path, config: dict, write: bool = True):
        self.rows, self.tracker = [], make(config.get("report_to"), run_dir, config) if write else None
        self.metrics = open(Path(run_dir) / "metrics.jsonl", "a") if write else open(os.devnull, "w")
        self.samples = open(Path(run_dir) / "samples.jsonl", "a") if write else open(os.devnull, "w")

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.metrics.close()
        self.samples.close()
        if self.tracker:
            self.tracker.close()

    def log(self, m: dict) -> None:
        self.metrics.write(json.dumps(m) + "\n")
        self.metrics.flush()
        if self.tracker:
            self.tracker.log(m)

    def step(self, m: dict, samples: list) -> None:
        """A GRPO step's line (m holds its "step") and its samples."""
        self.rows.append(m)
        self.log(m)
        self.samples.write("".join(json.dumps({"step": m["step"], **s}) + "\n" for s in samples))
        self.samples.flush()
