"""Checkpoints and `train.py --resume RUN_DIR`: a run killed at any moment goes on from its latest checkpoint,
exactly as if it had not stopped; what it keeps is what that checkpoint holds. A kill (SIGKILL, a crash)
loses the steps after it: checkpoints come every --save-every GRPO steps and after each role's SFT. A Ctrl-C
or SIGTERM loses nothing finished: train.py saves one after the step in progress (infra/interrupt.py).

    RUN_DIR/checkpoints/step-000010/     one checkpoint (a GRPO step boundary; sft-<k>: k roles' SFT done;
                                         sft-<k>-<n>: a Ctrl-C after step n of the next role's SFT)
        adapters/<role>/                 every role's LoRA adapter (peft format, as RUN_DIR/adapters/)
        optimizer.pt                     AdamW state (moments, step counts) of both adapters (and of the critic)
        critic.pt                        --algo ppo|stepcoder: the value head and the arm's state (ppo.Critic)
        rng.pt                           python / torch / CUDA RNG states, one entry per rank
        state.json                       step, problems consumed, SFT roles done (and steps of the next),
                                         bytes of the logs, wall s
    RUN_DIR/checkpoints/latest           the name of the newest WHOLE checkpoint

Writing (our choice, after verl's commit marker): everything goes into `.tmp-<name>/`, files fsync'd,
the folder is renamed in, and only then is `latest` replaced (write + rename, atomic on POSIX); older
checkpoints are removed after that (--keep-checkpoints). A process killed at any point leaves `latest`
naming a complete checkpoint (or none), so a half-written folder is never picked.
Resuming (the order matters): the base is rebuilt from RUN_DIR/config.json (the 4-bit base is never
saved), the adapters are loaded IN PLACE into the fresh, trainable LoRA modules (not
PeftModel.from_pretrained, whose default is_trainable=False freezes them), then the optimizer, and
the RNG last, because building the model draws from it. metrics.jsonl / samples.jsonl are cut back to
their length at the checkpoint, so each step appears once.
"""
import argparse
import json
import os
import random
import shutil
import signal
import sys
from pathlib import Path

import torch

import roles

# flags that may change on --resume: they do not change what the steps compute (an evaluation puts the RNG
# states back, so how often one runs, or on how many problems, leaves the steps as they were)
RUNTIME_FLAGS = {"resume", "out", "workers", "profile", "report_to", "keep_checkpoints", "save_every", "steps",
                 "time_budget", "overwrite", "eval_every", "eval_limit", "eval_samples"}


class CheckpointError(Exception):
    """A run cannot be resumed as asked; the message is one line for the user."""


def resume_args(ap: argparse.ArgumentParser, argv, run_dir: str) -> argparse.Namespace:
    """The run's own flags (RUN_DIR/config.json) + the runtime flags given again.

    A flag given again that changes what a step computes must equal the run's value, else
    CheckpointError names it. Flags the run predates take their defaults.
    """
    cfg_file = Path(run_dir) / "config.json"
    if not cfg_file.exists():
        raise CheckpointError(f"--resume {run_dir}: not a train.py run folder (no config.json)")
    cfg = json.loads(cfg_file.read_text())
    defaults = vars(ap.parse_args([]))
    for action in ap._actions:  # parse again with no defaults: only the flags on the command line
        action.default = argparse.SUPPRESS
    given = vars(ap.parse_args(argv))
    for k, v in given.items():
        want = cfg.get(k, defaults.get(k))
        if k == "roles":  # the chain as train.get_args reads it
            v = [r for r in roles.ROLES if r in v.split(",")]
        if k in RUNTIME_FLAGS or (k in ("device", "quant", "dtype") and v == "auto"):
            continue
        if v != want:
            flag = "--" + k.replace("_", "-")
            raise CheckpointError(f"--resume {run_dir}: {flag} {v} differs from the run's {want} "
                                  f"(config.json); leave it out or start a new run")
    return argparse.Namespace(**{**defaults, **cfg, **{k: given[k] for k in RUNTIME_FLAGS if k in given},
                                 "resume": run_dir, "out": run_dir})


def holds_work(run_dir) -> bool:
    """True when RUN_DIR holds a run's work: logged steps, a checkpoint or saved adapters. A fresh start
    there would erase it (prepare empties the logs), so train.py refuses one without --overwrite; a
    folder a failed start left with only config.json holds nothing and is simply started again."""
    run_dir = Path(run_dir)
    metrics = run_dir / "metrics.jsonl"
    return (run_dir / "checkpoints").is_dir() or (run_dir / "adapters").is_dir() or \
        (metrics.is_file() and metrics.stat().st_size > 0)


def fresh_state() -> dict:
    """A run's position before anything ran (what state.json holds)."""
    return {"step": 0, "consumed": 0, "sft_done": [], "sft_step": 0, "metrics_bytes": 0, "samples_bytes": 0, "wall_s": 0.0,
            "grpo_s": 0.0}


def finished(args, run_dir: Path, ckpt: Path, main_rank: bool = True) -> bool:
    """True (and one line printed) when the latest checkpoint is the run's end."""
    state = state_of(ckpt)
    sft_left = [r for r in (roles.sft_roles(args.roles) if args.sft_steps > 0 else []) if r not in state["sft_done"]]
    if (state["step"] < args.steps and not budget_spent(args, state)) or sft_left:
        return False
    if main_rank and not (Path(run_dir) / "adapters").exists():  # killed after its last checkpoint
        shutil.copytree(ckpt / "adapters", Path(run_dir) / "adapters")
    if main_rank:
        why = (f"--time-budget {args.time_budget:g} min spent: raise it to go on" if state["step"] < args.steps
               else "raise --steps to go on")
        print(f"{run_dir} is already finished: step {state['step']} of {args.steps} ({why})")
    return True


def budget_spent(args, state: dict) -> bool:
    """--time-budget MIN: True once the GRPO steps so far (state['grpo_s'], seconds of step wall time,
    evaluation and checkpoints not counted) reach MIN minutes. Our choice: equal GRPO time, not equal
    steps, is how `make experiment` compares systems whose steps cost differently."""
    budget = getattr(args, "time_budget", None)
    return budget is not None and state.get("grpo_s", 0.0) >= 60 * budget


def prepare(run_dir: Path, config: dict, ckpt: Path | None, state: dict):
    """The run folder before the first step: config.json (atomically), and metrics.jsonl /
    samples.jsonl cut back to their length at the checkpoint (emptied when starting without one),
    so each step appears once. Checkpoints of an earlier run in the folder are removed. Rank 0."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if not ckpt:
        shutil.rmtree(run_dir / "checkpoints", ignore_errors=True)
    _write_atomic(run_dir / "config.json", json.dumps(config, indent=2))
    for name in ("metrics", "samples"):
        cut_log(run_dir / f"{name}.jsonl", state[f"{name}_bytes"])


def batch_at(problems: list, consumed: int, n: int, seed: int) -> list:
    """Problems number consumed .. consumed+n-1 of the run's problem stream, which a resume continues.

    Epoch e = c // len(problems) is one permutation drawn from (seed, e): no problem repeats within
    an epoch, and the stream depends on nothing but (seed, how many were consumed).
    """
    out = []
    for c in range(consumed, consumed + n):
        epoch, i = divmod(c, len(problems))
        out.append(problems[_permutation(len(problems), seed, epoch)[i]])
    return out


_perms = {}


def _permutation(n: int, seed: int, epoch: int) -> list:
    if (n, seed, epoch) not in _perms:  # a string seed is hashed with sha512: stable across runs
        _perms[(n, seed, epoch)] = random.Random(f"{seed}-{epoch}").sample(range(n), n)
    return _perms[(n, seed, epoch)]


def rng_state() -> dict:
    """This process's random streams: python `random` (SFT batches), torch CPU and CUDA (sampling)."""
    return {"python": random.getstate(), "torch": torch.get_rng_state(),
            "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None}


def set_rng_state(s: dict):
    """Put back rng_state's streams. A checkpoint saved where more (or fewer) GPUs were visible: the CUDA states
    that fit are restored, device by device, and one line on stderr says the sampling will differ."""
    random.setstate(s["python"])
    torch.set_rng_state(s["torch"])
    if s["cuda"] is not None and torch.cuda.is_available():
        visible = torch.cuda.device_count()
        for i, state in enumerate(s["cuda"][:visible]):
            torch.cuda.set_rng_state(state, i)
        if len(s["cuda"]) != visible:
            print(f"note: the checkpoint holds the random states of {len(s['cuda'])} GPUs and {visible} are visible "
                  f"here: {min(visible, len(s['cuda']))} restored, so the sampling is not the saved run's",
                  file=sys.stderr)


def _order(name: str) -> tuple:
    """Writing order of checkpoint names: sft-1 < sft-1-000003 < sft-2 < step-000000 < step-000001 ..."""
    kind, *n = name.split("-")
    return (kind == "step", *map(int, n))


def _fsync_tree(folder: Path):
    for f in folder.rglob("*"):
        if f.is_file():
            with open(f, "rb") as fh:
                os.fsync(fh.fileno())


def _write_atomic(path: Path, text: str):
    tmp = path.with_name(f".{path.name}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _kill_if(var: str, name: str):
    """Test hook (tests/infra/test_resume.py): SIGKILL this process at a named point of a named checkpoint."""
    if os.environ.get(var) == name:
        os.kill(os.getpid(), signal.SIGKILL)


def save(run_dir: Path, name: str, policy, optimizer, state: dict, rngs: list, keep: int) -> Path:
    """Write checkpoint `name` (see the module docstring), point `latest` at it, prune to `keep`.

    state: JSON-able (step, consumed, sft_done, wall_s); rngs: one rng_state() per rank. The
    current lengths of RUN_DIR/metrics.jsonl and samples.jsonl are stored with it. Rank 0 only.
    """
    run_dir = Path(run_dir)
    state = {**state, **{f"{n}_bytes": os.path.getsize(run_dir / f"{n}.jsonl") if (run_dir / f"{n}.jsonl").exists()
                         else 0 for n in ("metrics", "samples")}}
    root = Path(run_dir) / "checkpoints"
    root.mkdir(parents=True, exist_ok=True)
    tmp, final = root / f".tmp-{name}", root / name
    shutil.rmtree(tmp, ignore_errors=True)  # a leftover of a killed write
    for role in policy.peft_config:
        policy.save_pretrained(tmp / "adapters", selected_adapters=[role])  # -> adapters/<role>/
    _kill_if("CORE_CODE_KILL_DURING_CHECKPOINT", name)  # half-written: adapters only
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    if getattr(policy, "critic", None) is not None:  # PPO's value head and state (ppo.setup)
        torch.save(policy.critic.state_dict(), tmp / "critic.pt")
    torch.save(rngs, tmp / "rng.pt")
    (tmp / "state.json").write_text(json.dumps({**state, "name": name}, indent=1))
    _fsync_tree(tmp)
    if final.exists():  # written before by a run killed before it moved `latest`
        shutil.rmtree(final)
    os.replace(tmp, final)
    _write_atomic(root / "latest", name + "\n")
    _kill_if("CORE_CODE_KILL_AFTER_CHECKPOINT", name)
    done = sorted((p.name for p in root.iterdir() if p.is_dir() and not p.name.startswith(".")), key=_order)
    for old in done[:-keep] if keep > 0 else []:
        shutil.rmtree(root / old, ignore_errors=True)
    return final


def latest(run_dir) -> Path | None:
    """The newest whole checkpoint of a run (what `latest` names), or None if there is none yet."""
    marker = Path(run_dir) / "checkpoints" / "latest"
    if not marker.exists():
        return None
    ckpt = marker.parent / marker.read_text().strip()
    if not (ckpt / "state.json").exists():
        raise CheckpointError(f"{marker} names {ckpt.name}, which is missing or incomplete")
    return ckpt


def state_of(ckpt: Path) -> dict:
    return json.loads((ckpt / "state.json").read_text())


def load(ckpt: Path, policy, optimizer, rank: int = 0, world: int = 1) -> dict:
    """Restore adapters (in place, trainable), optimizer, then this rank's RNG; returns the state.

    Raises CheckpointError when the checkpoint was written by another number of ranks.
    """
    from peft import set_peft_model_state_dict
    from safetensors.torch import load_file

    for role in policy.peft_config:
        f = ckpt / "adapters" / role / "adapter_model.safetensors"
        res = set_peft_model_state_dict(policy, load_file(f, device=str(next(policy.parameters()).device)),
                                        adapter_name=role)
        if getattr(res, "unexpected_keys", None):
            raise CheckpointError(f"{f} does not fit this model (e.g. {res.unexpected_keys[0]})")
    optimizer.load_state_dict(torch.load(ckpt / "optimizer.pt", map_location="cpu", weights_only=True))
    if getattr(policy, "critic", None) is not None:
        state = torch.load(ckpt / "critic.pt", map_location="cpu", weights_only=True)
        state.setdefault("seconds", torch.tensor(0.0, dtype=torch.float64))  # a checkpoint from before the clock
        policy.critic.load_state_dict(state)
    rngs = torch.load(ckpt / "rng.pt", weights_only=True)
    if len(rngs) != world:
        raise CheckpointError(f"{ckpt} was written by {len(rngs)} processes; resume it with as many")
    set_rng_state(rngs[rank])  # last: nothing after this may draw before the next step
    return state_of(ckpt)


def cut_log(path: Path, nbytes: int):
    """Truncate a JSONL log back to its length at the checkpoint (lines of later steps go)."""
    if path.exists():
        if path.stat().st_size < nbytes:
            raise CheckpointError(f"{path} is shorter than at its checkpoint ({nbytes} bytes)")
        os.truncate(path, nbytes)


def save_adapters(policy, run_dir: Path):
    """Write run_dir/adapters/<role>/ atomically: into a temp folder, then swapped in by rename."""
    tmp = run_dir / "adapters.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    for role in policy.peft_config:
        policy.save_pretrained(tmp, selected_adapters=[role])  # -> tmp/<role>/
    final, old = run_dir / "adapters", run_dir / "adapters.old"
    if final.exists():
        os.replace(final, old)
    os.replace(tmp, final)
    shutil.rmtree(old, ignore_errors=True)
