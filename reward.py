"""The reward of a program: its pass rate in the sandbox (sandbox.Result.pass_rate: tests passed / tests),
or 1 only when every test passes (--reward all_pass), plus the efficiency bonus for fast correct code
(--efficiency-weight; grpo.efficiency_bonus, or the authors' released form: --efficiency-reward release), both
on each program's cost measured outside its run (sandbox.Result.cost_s / cost_mb). docs/algorithm.md#the-reward.
"""
import torch

import efficiency
import scoring
import grpo


def step_rewards(rollouts, problems, args, clock) -> torch.Tensor:
    """Step 2 of train.grpo_step: rewards r [B, 1, programs per problem] of the step's programs (rewards_of), in tree order, each
    also written into its program's node, so that --reward all_pass and the efficiency bonus reach the credit.

    With --efficiency-weight > 0 and --efficiency-reward net the problems' reference solutions run too: their
    cost (CPU s measured outside the run) is the bonus's yardstick (ref_times [B] seconds, NaN for a problem
    without one).
    """
    B = len(problems)
    coders = rollouts.of("coder")
    results = [rollouts.nodes[i].result for i in coders]
    ref_times = None
    if args.efficiency_weight > 0 and not release(args):
        with clock("sandbox"):
            costs = scoring.reference_costs(problems, args)
        ref_times = torch.tensor([c[0] if c else float("nan") for c in costs])  # [B]
    rewards = rewards_of(results, (B, 1, len(coders) // B), args, ref_times)  # [B, 1, programs per problem]
    for i, r in zip(coders, rewards.flatten().tolist()):
        rollouts.nodes[i].reward = r
    return rewards


def rewards_of(results, shape, args, ref_times=None) -> torch.Tensor:
    """Sandbox results (flat, prompt-major) -> rewards of `shape` (docs/algorithm.md#the-reward): training
    passes [B, 1, K], K programs per problem (step_rewards).

    pass_rate: passed/total; all_pass: 1[verdict == passed]. --efficiency-weight lambda > 0 adds, for a
    program that passes every test (efficiency.program_cost: ET = cost_s, MU = cost_mb, measured outside
    the run, the empty program's fixed cost subtracted):
        net       grpo.efficiency_bonus: lambda * min(1, 1 / NET), NET = ET over the reference's (ref_times:
                  [B] seconds, NaN where a problem has none) or, without one, over the fastest fully-passing
                  program of the same problem (floor efficiency.ET_FLOOR_S)
        release   lambda * (0.1 exp(-3 ET) + 0.1 exp(-0.1 MU)) (efficiency.release_bonus; lambda = 1: the release's)
    """
    r = torch.tensor([x.pass_rate if args.reward == "pass_rate" else float(x.verdict == "passed")
                      for x in results]).view(shape)
    if args.efficiency_weight > 0:
        costs = [efficiency.program_cost(x) for x in results]  # (ET s, MU MiB) of a passing program, else None
        t = torch.tensor([c[0] if c else 0.0 for c in costs]).view(shape)
        ok = torch.tensor([c is not None for c in costs]).view(shape)
        if release(args):
            mu = torch.tensor([c[1] if c else 0.0 for c in costs]).view(shape)
            bonus = efficiency.release_bonus(t, mu).to(r.dtype)
            r = r + torch.where(ok, args.efficiency_weight * bonus, torch.zeros_like(r))
        else:
            r = r + grpo.efficiency_bonus(t, ok, ref_times, args.efficiency_weight, floor_s=efficiency.ET_FLOOR_S)
    return r


def release(args) -> bool:
    """--efficiency-reward release: the authors' exponential form instead of ours (NET)."""
    return getattr(args, "efficiency_reward", "net") == "release"
