"""The reward of a program: its pass rate in the sandbox (sandbox.Result.pass_rate: tests passed / tests),
or 1 only when every test passes (--reward all_pass), or the authors' shaped reward (--reward shaped:
pass rate + 0.1 if no test errored or timed out + 0.2 if all passed), plus the efficiency bonus for fast
correct code (--efficiency-weight; `efficiency_bonus` below, or the authors' released form: --efficiency-reward
release), on each program's cost measured outside its run (sandbox.Result.cost_s / cost_mb).
docs/algorithm.md#the-reward.

The efficiency bonus (`efficiency_bonus`, --efficiency-weight lambda), for program j of problem b
that passes EVERY test, with t = its CPU seconds measured outside its run (ET, measure/efficiency.py):
    NET_bj = max(t_bj, floor) / max(t0_b, floor),  t0_b = the reference's t when the record has one,
                                                    else min t over the fully-passing programs of problem b
    r_bj  += lambda * min(1, 1 / NET_bj)            (0 for a program that fails a test)
"""
import dataclasses
from contextlib import nullcontext

import torch

from measure import efficiency, scoring


def step_rewards(rollouts, problems, args, clock=None) -> torch.Tensor:
    """Step 2 of train.grpo_step, the one place a program node's reward is written (tree.build runs the
    programs and keeps each Result, tree.advantages reads the rewards): returns the Coder's rewards
    r [B, 1, programs per problem] (rewards_of: --reward, the efficiency bonus), in tree order, each also
    written into its program's node; a repair's node (a 'repair' role's program) gets its pass rate on all
    tests (the repaired r of grpo.debugger_advantages, --debug-reward). A node without a result (an
    evaluation tree, judge=False) keeps 0.

    With --efficiency-weight > 0 and --efficiency-reward net the problems' reference solutions run too: their
    cost (CPU s measured outside the run) is the bonus's yardstick (ref_times [B] seconds, NaN for a problem
    without one). clock(phase): a context manager that times the reference runs (progress.Clock; None: untimed).
    """
    B = len(problems)
    coders = rollouts.of("coder")
    results = [rollouts.nodes[i].result for i in coders]
    ref_times = None
    if args.efficiency_weight > 0 and not release(args):
        with clock("sandbox") if clock else nullcontext():
            costs = scoring.reference_costs(problems, args)
        ref_times = torch.tensor([c[0] if c else float("nan") for c in costs])  # [B]
    rewards = rewards_of(results, (B, 1, len(coders) // B), args, ref_times)  # [B, 1, programs per problem]
    for i, r in zip(coders, rewards.flatten().tolist()):
        rollouts.nodes[i].reward = r
    for n in rollouts.nodes:  # the repairs
        if n.role != "coder" and n.result is not None:
            n.reward = n.result.pass_rate
    return rewards


def rewards_of(results, shape, args, ref_times=None) -> torch.Tensor:
    """Sandbox results (flat, prompt-major) -> rewards of `shape` (docs/algorithm.md#the-reward): training
    passes [B, 1, K], K programs per problem (step_rewards).

    pass_rate, all_pass, shaped: program_reward. --efficiency-weight lambda > 0 adds, for a
    program that passes every test (efficiency.program_cost: ET = cost_s, MU = cost_mb, measured outside
    the run, the empty program's fixed cost subtracted):
        net       efficiency_bonus: lambda * min(1, 1 / NET), NET = ET over the reference's (ref_times:
                  [B] seconds, NaN where a problem has none) or, without one, over the fastest fully-passing
                  program of the same problem (floor efficiency.ET_FLOOR_S)
        release   lambda * (0.1 exp(-3 ET) + 0.1 exp(-0.1 MU)) (efficiency.release_bonus; lambda = 1: the release's)
    """
    r = torch.tensor([program_reward(x, args.reward) for x in results]).view(shape)
    if args.efficiency_weight > 0:
        costs = [efficiency.program_cost(x) for x in results]  # (ET s, MU MiB) of a passing program, else None
        t = torch.tensor([c[0] if c else 0.0 for c in costs]).view(shape)
        ok = torch.tensor([c is not None for c in costs]).view(shape)
        if release(args):
            mu = torch.tensor([c[1] if c else 0.0 for c in costs]).view(shape)
            bonus = efficiency.release_bonus(t, mu).to(r.dtype)
            r = r + torch.where(ok, args.efficiency_weight * bonus, torch.zeros_like(r))
        else:
            r = r + efficiency_bonus(t, ok, ref_times, args.efficiency_weight)  # floor: efficiency.ET_FLOOR_S
    return r


def efficiency_bonus(times: torch.Tensor, passed: torch.Tensor, ref_times: torch.Tensor | None = None,
                     weight: float = 1.0, floor_s: float = efficiency.ET_FLOOR_S) -> torch.Tensor:
    """Reward bonus for fast correct code: lambda * min(1, 1 / NET) (the equation in the module docstring).

    times: [B, ...] CPU seconds of each program (ET: its cost measured outside its run, efficiency.program_cost;
    ignored where not passed), e.g. [B, G, M];
    passed: [B, ...] bool, True for a program that passed every test;
    ref_times: [B] the reference solution's ET on the same tests, NaN where the problem has none; None: no
    references. Without a reference the normaliser is the fastest fully-passing program of the SAME
    problem (all its G*M programs: the group). weight: lambda. floor_s: times below it count as equal
    (efficiency.ET_FLOOR_S: a run's cost below a few ms is mostly measurement noise), so noise earns nothing.
    Returns [B, ...] bonus in [0, lambda]: lambda for a program as fast as the reference or faster,
    lambda / 2 at twice its time, 0 for a program that fails a test. Source: NET from EffiBench
    (Huang et al. 2024); bounded 1 / NET so the bonus never outweighs passing (our choice).

    >>> efficiency_bonus(torch.tensor([[0.01, 0.02, 0.04]]), torch.tensor([[True, True, False]]),
    ...                  torch.tensor([0.01]), weight=0.5)
    tensor([[0.5000, 0.2500, 0.0000]])
    """
    B = times.shape[0]
    t = times.clamp(min=floor_s)  # [B, ...]
    inf = torch.full_like(t, float("inf"))
    t0 = torch.where(passed, t, inf).reshape(B, -1).amin(1)  # [B] fastest passing program of the problem
    if ref_times is not None:
        ref = ref_times.to(t)
        t0 = torch.where(torch.isfinite(ref), ref.clamp(min=floor_s), t0)  # [B]
    t0 = t0.view(B, *([1] * (t.dim() - 1)))  # [B, 1, ...]
    speed = (t0 / t).clamp(max=1.0)  # min(1, 1 / NET)
    return torch.where(passed, weight * speed, torch.zeros_like(t))


def release(args) -> bool:
    """--efficiency-reward release: the authors' exponential form instead of ours (NET)."""
    return getattr(args, "efficiency_reward", "net") == "release"


RAN = ("passed", "failed")  # a test that ran to the end and printed an answer that was compared


def no_error(result) -> bool:
    """True when the program ran every test to a verdict on its answer: each test's verdict is passed or
    failed (an answer compared), none error, timeout, memory, output_limit, no_code or sandbox_error; a
    run with no test is not clean.

    The release tells an error by the marker its runner writes in place of the output ("<THIS IS Error>",
    AlbertZhaoCA/e1, examples/reward_function/higher-order.py): a raised exception or a timeout. Our
    sandbox's per-test verdicts (Result.tests) say the same and more; our choice, where the release is
    silent: a memory or output limit, a program without code and a sandbox failure are errors too (none
    of them ran to a compared answer), and a wrong answer is not."""
    return bool(result.tests) and all(v in RAN for v in result.tests)


SHAPED_CLEAN, SHAPED_ALL = 0.1, 0.2  # the release's bonuses (examples/reward_function/code.py, per design notes)


def program_reward(result, kind: str = "pass_rate") -> float:
    """One program's reward from its sandbox Result (s = tests passed / tests):
    pass_rate  s;   all_pass  1[every test passed];
    shaped     s + 0.1 * 1[no_error] + 0.2 * 1[every test passed]  (the authors' release, code.py):
               all 4 of 4 passed -> 1.3; 2 of 4, the others wrong answers -> 0.6; 2 of 4, one raised -> 0.5.
    Raises ValueError for another kind."""
    if kind == "pass_rate":
        return result.pass_rate
    if kind == "all_pass":
        return float(result.verdict == "passed")
    if kind == "shaped":
        return result.pass_rate + SHAPED_CLEAN * no_error(result) + SHAPED_ALL * (result.verdict == "passed")
    raise ValueError(f"unknown reward '{kind}': use pass_rate, all_pass or shaped")


def dynamic_keep(rewards: torch.Tensor, cap: int) -> list[int]:
    """DAPO's dynamic sampling (Yu et al. 2025, sec. 3.2: "over-sample and filter out prompts with the accuracy
    equal to 1 and 0"): the first `cap` problems, in batch order, whose programs' rewards r [B, 1, programs]
    have a spread (max > min). A problem without one has every advantage of its tree 0 (no program beats
    another, so no plan does), so it would only add its tokens to the loss's normaliser. --dynamic-sampling N
    draws N x --problems-per-step problems and keeps problems-per-step of them (verl's DAPO recipe with one
    generation batch: gen_batch_size = N x train_batch_size; our choice: no second round of sampling).

    >>> dynamic_keep(torch.tensor([[[0., 0.]], [[0., 1.]], [[1., 1.]], [[.5, 1.]], [[0., .5]]]), 2)
    [1, 3]
    """
    flat = rewards.flatten(1)  # [B, programs]
    spread = (flat.amax(1) > flat.amin(1)).tolist()
    return [b for b, s in enumerate(spread) if s][:cap]


def only_problems(forest, credit: dict, keep: list) -> dict:
    """credit ({role: tree.Credit}) with every node of a problem not in `keep` out of the loss: advantage 0, not
    valid (so not in the loss's normaliser either). The rewards and metrics of the step still see them."""
    out = {}
    for role, c in credit.items():
        kept = torch.tensor([forest.nodes[i].problem in keep for i in forest.of(role)], dtype=torch.bool)
        if len(kept) != len(c.adv):  # a role whose credit rows are not its tree nodes: left as it is
            out[role] = c
            continue
        out[role] = dataclasses.replace(c, adv=c.adv * kept, valid=c.valid & kept)
    return out
