"""Data parallel over `torchrun` (nanoGPT-style add-on; one process never touches torch.distributed).

    torchrun --nproc_per_node 2 train.py ...          # NCCL on GPUs, gloo on CPU

Each rank takes its own slice of each step's problems and samples WHOLE groups of them (a group
never spans ranks, so advantages need no communication). Per step and role:

    loss_rank = sum_{rank's tokens} w_t * l_t,  w from grpo.loss_weights over the rank's rows,
                times  local count / global count      (tokens for 'token', sequences otherwise)

so sum over ranks of loss_rank is the 1-process loss of the whole step, and the step's gradient is
the SUM of the ranks' gradients (not the mean). Our choice: one explicit all-reduce of all LoRA
gradients, flattened in parameter order, after both roles' backward passes, instead of the DDP
wrapper: DDP reduces at every backward (two roles x several micro-batches per step, unless no_sync
is threaded through) and needs find_unused_parameters, since peft's set_adapter switches
requires_grad between the two adapters. One collective per step, and a flag per parameter keeps
"this parameter got no gradient" (AdamW skips it) identical on every rank.
Every rank reaches every collective: the normaliser reduce of each role runs before any row is
skipped, and the gradient reduce runs even when a rank had no signal or a non-finite loss.
"""
import datetime
import os

import torch
import torch.distributed as dist


def setup(device: str) -> tuple[int, int, str]:
    """Join torchrun's process group when WORLD_SIZE > 1; returns (rank, world size, device)."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1:
        return 0, 1, device
    rank, local = int(os.environ["RANK"]), int(os.environ.get("LOCAL_RANK", "0"))
    if device == "cuda":
        torch.cuda.set_device(local)  # "cuda" below means this rank's GPU
    # 1 h, not the 10-30 min default: the other ranks wait at the next collective while rank 0
    # alone runs the held-out evaluation or writes a checkpoint
    dist.init_process_group("nccl" if device == "cuda" else "gloo", timeout=datetime.timedelta(hours=1))
    return rank, world, device


def on() -> bool:
    return dist.is_available() and dist.is_initialized()


def rank() -> int:
    return dist.get_rank() if on() else 0


def world() -> int:
    return dist.get_world_size() if on() else 1


def cleanup():
    if on():
        dist.destroy_process_group()


def normaliser_share(mask: torch.Tensor, loss_type: str) -> float:
    """local count / count over all ranks, of what grpo.loss_weights divides by. 1.0 in one process.

    mask: [N, T] the rank's loss mask of one role. A collective: every rank calls it for every role.
    """
    if not on():
        return 1.0
    n = mask.sum() if loss_type == "token" else (mask.sum(-1) > 0).sum()
    local = n.detach().double().reshape(1)
    total = local.clone()
    dist.all_reduce(total)
    return 1.0 if total.item() == 0 else local.item() / total.item()


def reduce_grads(params: list, bad: bool) -> bool:
    """Sum every LoRA gradient over ranks (one flat all-reduce); returns whether any rank was bad.

    A parameter keeps grad None only when no rank gave it one. A collective.
    """
    if not on():
        return bad
    dev = params[0].device
    flat = torch.cat([(p.grad if p.grad is not None else torch.zeros_like(p)).float().flatten() for p in params]
                     + [torch.tensor([float(p.grad is not None) for p in params] + [float(bad)], device=dev)])
    dist.all_reduce(flat)
    flags = flat[-len(params) - 1:].tolist()  # one copy to the host, not one sync per parameter
    k = 0
    for p, got in zip(params, flags):
        n = p.numel()
        p.grad = flat[k:k + n].view_as(p).to(p.dtype) if got > 0 else None
        k += n
    return flags[-1] > 0


def broadcast_params(params: list, optimizer=None):
    """Rank 0's LoRA weights on every rank (at the start the same seed gives them too; this makes sure), and with
    `optimizer` its state of them too (AdamW's moments): after the cold-start SFT, which every rank runs on the
    same batches, the ranks' GPUs may round differently, and weights made equal with moments left apart would
    drift apart again in the GRPO steps."""
    if on():
        for p in params:
            dist.broadcast(p.data, 0)
            state = optimizer.state.get(p, {}) if optimizer is not None else {}
            for t in state.values():
                if isinstance(t, torch.Tensor) and t.dim() > 0:  # the moments; the step count is a 0-dim scalar
                    dist.broadcast(t, 0)


def gather(obj) -> list:
    """[obj of rank 0, obj of rank 1, ...] on every rank (metrics, samples, RNG states)."""
    if not on():
        return [obj]
    out = [None] * world()
    dist.all_gather_object(out, obj)
    return out


def merge_step(metrics: dict, samples: list) -> tuple[dict, list]:
    """The step's metrics line and samples over all ranks (unchanged in one process). A collective."""
    if not on():
        return metrics, samples
    parts = gather((metrics, samples))
    return merge_metrics([m for m, _ in parts]), [s for _, ss in parts for s in ss]


def merge_metrics(ms: list) -> dict:
    """One metrics line from the ranks' lines: every rank had the same number of problems, so the
    mean of the ranks' means is the step's mean; loss (globally normalised) and verdicts add up,
    times take the slowest rank, grad_norm / skipped_updates are equal on every rank already."""
    out = dict(ms[0])
    for k, v in ms[0].items():
        vals = [m[k] for m in ms if m.get(k) is not None]
        if k == "loss":
            out[k] = sum(vals)
        elif k == "verdicts":
            out[k] = {v: sum(m[k].get(v, 0) for m in ms) for v in sorted({v for m in ms for v in m[k]})}
        elif k.startswith("time_"):
            out[k] = max(vals)
        elif k not in ("grad_norm", "skipped_updates") and (isinstance(v, float) or v is None):
            out[k] = sum(vals) / len(vals) if vals else None
    return out
