"""torchrun data parallel on CPU (gloo): 2 processes with 1 problem each train exactly as 1 process with
both problems (tiny Qwen2, teacher-forced rollouts so the samples do not depend on the ranks' seeds, padded
to one fixed width so that no row's float math depends on the other rows of its batch)."""
import json
import os
import subprocess
import sys

import torch

import data
from conftest import ROOT
from infra import checkpoint, distributed

FLAGS = ["--steps", "2", "--sft-steps", "0", "--problems-per-step", "2", "--num-plans", "2", "--codes-per-plan", "2",
         "--max-plan-tokens", "4", "--max-code-tokens", "4", "--lora-r", "4", "--lr", "1e-2", "--workers", "1"]


def launch(prefix, out, dump, zero):
    env = {**os.environ, "TINY_FORCED": "1", "TINY_PATTERN": "1,0,0.5,1", "TINY_ZERO": zero, "TINY_DUMP": dump,
           "OMP_NUM_THREADS": "1"}
    p = subprocess.run([*prefix, "tests/tiny_train.py", *FLAGS, "--out", str(out)], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
    return [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]


def test_two_ranks_equal_one_process_with_both_problems(tmp_path):
    """After 2 steps: the adapters of rank 0 and rank 1 are bit-identical and equal (atol 1e-6) those of
    one process that had both problems; the logged reward, loss and verdicts agree. At step 1 rank 1's
    problem has no signal at all (every program fails), so rank 1 runs no backward and must still join
    every collective. Catches: per-rank loss normalisers (the gradient would be 2x / 0.5x per role),
    gradients averaged instead of summed over globally normalised losses, a parameter stepped on one
    rank only (grad None there), a rank that skips the all-reduce (the run would hang, then time out),
    metrics of rank 0 alone."""
    step1 = checkpoint.batch_at(data.load("train"), 0, 2, seed=0)
    zero = step1[1].task_id  # rank 1's problem at step 1
    one = launch([sys.executable], tmp_path / "one", str(tmp_path / "one-{rank}.pt"), zero)
    two = launch([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"],
                 tmp_path / "two", str(tmp_path / "two-{rank}.pt"), zero)
    d1, d0, d2 = (torch.load(tmp_path / f, weights_only=True) for f in ("one-0.pt", "two-0.pt", "two-1.pt"))
    w1, r0, r1 = d1["weights"], d0["weights"], d2["weights"]
    assert w1.keys() == r0.keys() == r1.keys() and all(torch.equal(r0[k], r1[k]) for k in r0)
    assert len(d1["grads"]) == len(d0["grads"]) == 2  # both steps stepped, on both setups
    gdiff, gmax = 0.0, 0.0
    for g1, g2 in zip(d1["grads"], d0["grads"]):
        assert [g is None for g in g1] == [g is None for g in g2]  # the same parameters stepped
        gdiff = max([gdiff] + [(a - b).abs().max().item() for a, b in zip(g1, g2) if a is not None])
        gmax = max([gmax] + [a.abs().max().item() for a in g1 if a is not None])
    diff = max((w1[k] - r0[k]).abs().max().item() for k in w1)
    moved = max(w1[k].abs().max().item() for k in w1 if "lora_B" in k)  # B starts at 0
    print(f"\n1 process vs 2 ranks, 2 steps: gradients max abs diff {gdiff:.3g} (largest |g| {gmax:.3g}); "
          f"LoRA weights max abs diff {diff:.3g} (largest |B| {moved:.3g})")
    # float error only, from the order of the sums (one process adds 4 micro-batches, 2 ranks add 2 each, then
    # the all-reduce): TINY_FORCED pads every row to one fixed width, so each row's tensors, log-probs and step-1
    # gradient are bit-identical in both setups. Padding to the batch's widest row made this fail on an AMD EPYC
    # (AVX-512, fp32) by 2.5e-3 of |g|: at step 1 the coder's 2 micro-batches cancel to 1/5000 of either (the
    # same completions under the 2 plans, advantages +-0.9998 and -+0.9996), so the 1.6e-7 by which SDPA's
    # backward there differs for completions padded to 12 vs 5 tokens (eager attention: 0) became 8e-4 of the
    # step's gradient; AdamW's first step, g / (|g| + eps), made that weights 6e-4 apart, and step 2 diverged
    assert gdiff <= 1e-6 * gmax + 1e-8 and diff <= 1e-4 and moved > 1e-3
    assert [m["frac_zero_std_coder"] for m in one] == [0.5, 0.0] and [m["step"] for m in two] == [1, 2]
    for a, b in zip(one, two):
        assert a["verdicts"] == b["verdicts"] and abs(a["reward"] - b["reward"]) < 1e-9
        assert abs(a["loss"] - b["loss"]) < 1e-6 and abs(a["grad_norm"] - b["grad_norm"]) < 1e-5
    samples = [json.loads(x)["task_id"] for x in (tmp_path / "two" / "samples.jsonl").read_text().splitlines()]
    assert samples[:2] == [p.task_id for p in step1] and len(samples) == 4  # rank 0 wrote both ranks'


def test_a_role_without_rows_on_this_rank_still_joins_its_collective(monkeypatch):
    """update.gradient_step with --roles planner,coder,debugger on a rank whose Debugger had no failing program
    (no 'debugger' credit): the normaliser all-reduce still runs once per role per iteration, in the roles' order,
    as on a rank that has debugger rows (each role_backward runs one). Catches: the rank skipping the role, so
    its next collective meets the other ranks' debugger all-reduce (NCCL: a hang or wrong sums)."""
    import types

    import train
    import update
    from infra import distributed, progress

    calls = []
    monkeypatch.setattr(distributed, "normaliser_share", lambda mask, loss_type: calls.append(mask.shape[0]) or 1.0)
    monkeypatch.setattr(distributed, "reduce_grads", lambda params, bad: calls.append("grads") or bad)

    def role_backward(policy, role, *a, **k):  # the real one calls normaliser_share once, first
        distributed.normaliser_share(torch.ones(3, 1), "token")
        return 0.0, {}
    monkeypatch.setattr(update, "role_backward", role_backward)
    args = train.get_args(["--roles", "planner,coder,debugger", "--num-iterations", "2"])
    monkeypatch.setattr(update, "all_logprobs", lambda *a: None)
    p = torch.nn.Parameter(torch.zeros(2))
    policy = types.SimpleNamespace(parameters=lambda: iter([p]), set_adapter=lambda role: None)
    rollouts = types.SimpleNamespace(outputs={"planner": [None], "coder": [None]})
    credit = {role: types.SimpleNamespace(adv=None, valid=None) for role in ("planner", "coder")}
    update.gradient_step(policy, rollouts, credit, args, torch.optim.AdamW([p]), progress.Clock("cpu"))
    assert calls == [3, 3, 0, "grads"] * 2  # planner, coder, the debugger's empty share, the gradient sum


def test_the_gradient_all_reduce_copies_its_flags_to_the_host_once(tmp_path):
    """distributed.reduce_grads in a 1-process gloo group: one .tolist() of the got-a-gradient flags, not one sync
    per parameter (448 LoRA tensors of the 1.5B recipe); a parameter without a gradient keeps None, the others
    their sums. Catches: `if flat[i] > 0` per parameter."""
    import torch.distributed as dist

    from host_syncs import HostSyncs
    from infra import distributed

    dist.init_process_group("gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1)
    try:
        params = [torch.nn.Parameter(torch.zeros(3)) for _ in range(5)]
        for i, p in enumerate(params):
            p.grad = torch.full((3,), float(i)) if i != 2 else None
        with HostSyncs() as syncs:
            bad = distributed.reduce_grads(params, False)
    finally:
        dist.destroy_process_group()
    assert syncs.calls == ["tolist"] and bad is False
    assert params[2].grad is None and [p.grad[0].item() for i, p in enumerate(params) if i != 2] == [0.0, 1.0, 3.0, 4.0]


def test_workers_default_shares_the_cores_among_the_ranks_of_a_node(monkeypatch):
    """8 cores: --workers defaults to 8 in one process, 4 on each of torchrun's 2 local ranks, at least 1.
    Catches: every rank starting a sandbox pool of all the cores (2x oversubscribed)."""
    import train
    from infra import flags

    monkeypatch.setattr(flags.os, "cpu_count", lambda: 8)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert train.get_args([]).workers == 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert train.get_args([]).workers == 4 and train.get_args(["--workers", "3"]).workers == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "16")
    assert train.get_args([]).workers == 1


def test_after_sft_rank_0_broadcasts_the_weights_and_adams_moments(monkeypatch):
    """Catches: SFT under torchrun making the ranks' weights equal but leaving each rank's AdamW moments as its own
    GPU rounded them (the GRPO steps then move the weights apart again)."""
    p, q = torch.nn.Parameter(torch.ones(3)), torch.nn.Parameter(torch.ones(2))
    opt = torch.optim.AdamW([p, q], lr=0.1)
    p.grad = torch.full((3,), 0.5)
    opt.step()  # q got no gradient: no state
    sent = []
    monkeypatch.setattr(distributed, "on", lambda: True)
    monkeypatch.setattr(distributed.dist, "broadcast", lambda t, src: sent.append((t.data_ptr(), src)))
    distributed.broadcast_params([p, q], opt)
    st = opt.state[p]
    assert sent == [(p.data_ptr(), 0), (st["exp_avg"].data_ptr(), 0), (st["exp_avg_sq"].data_ptr(), 0),
                    (q.data_ptr(), 0)]
    sent.clear()
    distributed.broadcast_params([p, q])  # at the start: weights only
    assert sent == [(p.data_ptr(), 0), (q.data_ptr(), 0)]
