"""The reward of a program: its pass rate in the sandbox (sandbox.Result.pass_rate: tests passed / tests),
or 1 only when every test passes (--reward all_pass), plus the efficiency bonus for fast correct code
(--efficiency-weight; grpo.efficiency_bonus). docs/algorithm.md#the-reward.
"""
import torch

import efficiency
import scoring
import grpo


def step_rewards(rollouts, problems, args, clock) -> torch.Tensor:
    """Step 2 of train.grpo_step: rewards r [B, 1, programs per problem] of the step's programs (rewards_of), in tree order, each
    also written into its program's node, so that --reward all_pass and the efficiency bonus reach the credit.

    With --efficiency-weight > 0 the problems' reference solutions run too: their tests' CPU time is the
    efficiency bonus's yardstick (ref_times [B] seconds, NaN for a problem without one).
    """
    B = len(problems)
    coders = rollouts.of("coder")
    results = [rollouts.nodes[i].result for i in coders]
    ref_times = None
    if args.efficiency_weight > 0:
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

    pass_rate: passed/total; all_pass: 1[verdict == passed]. --efficiency-weight lambda > 0 adds
    grpo.efficiency_bonus: lambda * min(1, 1 / NET) for a program that passes every test, NET = its
    tests' CPU time (ET) over the reference's (ref_times: [B] seconds, NaN where a problem has none)
    or, without one, over the fastest fully-passing program of the same problem.
    """
    r = torch.tensor([x.pass_rate if args.reward == "pass_rate" else float(x.verdict == "passed")
                      for x in results]).view(shape)
    if args.efficiency_weight > 0:
        costs = [efficiency.program_cost(x) for x in results]  # (ET s, MU MiB) of a passing program, else None
        t = torch.tensor([c[0] if c else 0.0 for c in costs]).view(shape)
        ok = torch.tensor([c is not None for c in costs]).view(shape)
        r = r + grpo.efficiency_bonus(t, ok, ref_times, args.efficiency_weight)
    return r
