"""grpo.py on hand-computed tensors; each expected number is worked out in the comment beside it."""
import math

import pytest
import torch

import grpo


def test_token_logprobs_hand_value():
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]])  # softmax: [1/4, 3/4], [1/2, 1/2]
    lp = grpo.token_logprobs(logits, torch.tensor([[1, 0]]))
    assert torch.allclose(lp, torch.tensor([[math.log(0.75), math.log(0.5)]]), atol=1e-6)


def test_completion_mask_keeps_eos_when_pad_equals_eos():
    # prompt width 3 (it contains an EOS id 2 that must not matter), completion 7 8 EOS, then pads (= EOS)
    seqs = torch.tensor([[2, 4, 5, 7, 8, 2, 2, 2],
                         [0, 4, 5, 7, 8, 9, 9, 9]])
    mask, truncated = grpo.completion_mask(seqs, 3, eos_id=2)
    assert mask.tolist() == [[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]
    assert truncated.tolist() == [False, True]


def test_completion_mask_empty_completion_is_one_eos():
    mask, truncated = grpo.completion_mask(torch.tensor([[4, 5, 2, 2]]), 2, eos_id=2)
    assert mask.tolist() == [[1, 0]] and truncated.tolist() == [False]


def test_group_advantages_hand_values():
    # [1, 0, 0, 0]: mean 0.25, population std sqrt(0.1875) = 0.4330127
    adv, zero = grpo.group_advantages(torch.tensor([[1.0, 0.0, 0.0, 0.0]]), torch.ones(1, 4, dtype=torch.bool))
    std = math.sqrt(0.1875)
    expected = [0.75 / (std + 1e-4)] + [-0.25 / (std + 1e-4)] * 3  # 1.73165, -0.57722
    assert adv[0].tolist() == pytest.approx(expected, rel=1e-6)
    assert zero.tolist() == [False]


@pytest.mark.parametrize("value", [0.0, 1.0, 0.3, 1 / 3])
def test_equal_rewards_give_exactly_zero(value):  # docs/algorithm.md#equal-rewards-give-nan-or-non-zero-advantages
    """Catches: NaN, or 1e-12 / 1e-4 noise, as the advantages of a group whose rewards are all equal."""
    adv, zero = grpo.group_advantages(torch.full((2, 5), value), torch.ones(2, 5, dtype=torch.bool))
    assert torch.equal(adv, torch.zeros(2, 5)) and zero.tolist() == [True, True]


def test_empty_sibling_does_not_shift_baseline():  # docs/algorithm.md#an-empty-sibling-shifts-the-group-baseline
    r = torch.tensor([[1.0, 0.0, 0.0]])
    adv, _ = grpo.group_advantages(r, torch.tensor([[True, True, False]]))
    # as if the group were [1, 0]: mean 0.5, std 0.5
    assert adv[0].tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0], rel=1e-6)
    adv1, zero1 = grpo.group_advantages(r, torch.tensor([[True, False, False]]))  # one valid: no signal
    assert torch.equal(adv1, torch.zeros(1, 3)) and zero1.item()


def test_planner_and_coder_advantages():
    # B=1 problem, G=4 plans, M=2 codes: plan rewards R^P = [1, 0, 0.5, 0]
    r = torch.tensor([[[1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.0]]])
    valid = torch.ones(1, 4, 2, dtype=torch.bool)
    a_p, zero_p = grpo.planner_advantages(r, valid, torch.ones(1, 4, dtype=torch.bool))
    std = math.sqrt((0.625 ** 2 + 0.375 ** 2 + 0.125 ** 2 + 0.375 ** 2) / 4)  # mean 0.375 -> 0.41458
    assert a_p[0].tolist() == pytest.approx([x / (std + 1e-4) for x in (0.625, -0.375, 0.125, -0.375)], rel=1e-6)
    a_c, zero_c = grpo.coder_advantages(r, valid, "plan")
    # only plan 2 has a spread: [1, 0] -> +-0.5/0.5001; the others are exactly 0
    assert a_c[0].flatten().tolist() == pytest.approx([0, 0, 0, 0, 0.5 / 0.5001, -0.5 / 0.5001, 0, 0], rel=1e-6)
    assert zero_c[0].tolist() == [True, True, False, True]
    a_pb, zero_pb = grpo.coder_advantages(r, valid, "problem")  # one group of 8: mean 3/8
    std8 = math.sqrt((3 * 0.625 ** 2 + 5 * 0.375 ** 2) / 8)
    assert a_pb[0, 0, 0].item() == pytest.approx(0.625 / (std8 + 1e-4), rel=1e-6)
    assert zero_pb.tolist() == [False]


def test_loss_weights_and_microbatch_invariance():  # docs/algorithm.md#excluded-samples-still-count-in-the-normaliser
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])  # row 3 excluded
    close = lambda got, want: torch.allclose(got, torch.tensor(want), atol=1e-7)  # noqa: E731
    assert close(grpo.loss_weights(mask, "token"), [[1 / 3, 1 / 3, 0], [1 / 3, 0, 0], [0, 0, 0]])
    assert close(grpo.loss_weights(mask, "grpo"), [[0.25, 0.25, 0], [0.5, 0, 0], [0, 0, 0]])
    assert close(grpo.loss_weights(mask, "dr_grpo", 3), [[1 / 6, 1 / 6, 0], [1 / 6, 0, 0], [0, 0, 0]])
    with pytest.raises(ValueError):
        grpo.loss_weights(mask, "sum")
    logp = torch.tensor([[-1.0, -2.0, -3.0], [-0.5, -1.0, -1.5], [-1.0, -1.0, -1.0]])
    adv = torch.tensor([1.0, -2.0, 0.5])
    w = grpo.loss_weights(mask, "token")
    full, _ = grpo.grpo_loss(logp, logp, logp, adv, w)
    parts = sum(grpo.grpo_loss(logp[i:i + 1], logp[i:i + 1], logp[i:i + 1], adv[i:i + 1], w[i:i + 1])[0] for i in range(3))
    # ratio 1, KL 0: L = -(1*1/3 + 1*1/3 - 2*1/3) = 0
    assert full.item() == pytest.approx(0.0, abs=1e-7) and parts.item() == pytest.approx(full.item(), abs=1e-7)


def test_grpo_loss_reinforce_gradient_and_zero_kl_at_start():  # docs/algorithm.md#kl-is-not-zero-before-the-first-update
    logp = torch.tensor([[-1.0, -2.0]], requires_grad=True)
    w = torch.tensor([[0.5, 0.5]])
    loss, m = grpo.grpo_loss(logp, logp.detach(), logp.detach(), torch.tensor([2.0]), w, beta=0.04)
    assert loss.item() == pytest.approx(-2.0) and m["kl"] == 0.0 and m["clip_frac"] == 0.0
    loss.backward()
    assert logp.grad.tolist() == [[-1.0, -1.0]]  # dL/dlogp_t = -w_t * A: REINFORCE


def test_grpo_loss_clipping_and_k3_kl_values():
    """Catches: clip applied as max instead of min (pessimistic bound), eps_high ignored, k3 with the
    sign of d flipped (exp(-d) + d - 1 gives 0.193147, not 0.306853)."""
    old = torch.zeros(1, 2)
    logp = torch.log(torch.tensor([[1.5, 0.5]]))  # ratios 1.5 and 0.5
    ref = logp + math.log(2.0)  # d = log 2 -> k3 = 2 - log 2 - 1 = 0.306853
    w = torch.tensor([[0.5, 0.5]])
    loss_pos, m = grpo.grpo_loss(logp, old, ref, torch.tensor([1.0]), w, 0.2, 0.28, beta=0.0)
    # A = +1: min(1.5, 1.28) = 1.28 and min(0.5, 0.8) = 0.5 -> L = -(1.28 + 0.5) / 2
    assert loss_pos.item() == pytest.approx(-(1.28 + 0.5) / 2, rel=1e-6)
    assert m["clip_frac"] == 1.0 and m["kl"] == pytest.approx(1 - math.log(2), rel=1e-6)
    loss_neg, _ = grpo.grpo_loss(logp, old, ref, torch.tensor([-1.0]), w, 0.2, 0.28, beta=0.1)
    # A = -1: min(-1.5, -1.28) = -1.5, min(-0.5, -0.8) = -0.8; KL term 0.1 * 0.306853 per token
    assert loss_neg.item() == pytest.approx(-(-1.5 - 0.8) / 2 + 0.1 * (1 - math.log(2)), rel=1e-6)


def test_rewards_pass_rate_all_pass_and_efficiency_bonus():
    """Catches: the bonus for a failing program, the whole run's cpu_s (fixed cost included) or the
    per-test CPU the program claimed instead of its cost measured outside (cost_s), the group's fastest
    used where the problem has a reference, NET not capped at 1; the released form on hand values."""
    import dataclasses

    import reward
    import sandbox
    import train

    def R(verdict, passed, cost, mb=0.0):  # a Result with its cost (sum of the tuple), claiming 0 s per test
        return dataclasses.replace(sandbox.Result(verdict, passed, 2, 0.03, 0.03, 9.0), test_cpu_s=(0.0, 0.0),
                                   test_wall_s=(0.0, 0.0), test_mem_mb=(0.0, 0.0), cost_s=sum(cost), cost_mb=mb)
    results = [R("passed", 2, (0.004, 0.006)), R("passed", 2, (0.01, 0.01)),  # problem 1: no reference
               R("failed", 1, (0.001, 0.001)), R("passed", 2, (0.01, 0.03))]  # problem 2: reference ET 0.01 s
    args = train.get_args(["--efficiency-weight", "0.5"])
    ref = torch.tensor([float("nan"), 0.01])
    # problem 1: fastest passing ET 0.01 -> 1 + 0.5 * 0.01/0.01 = 1.5 and 1 + 0.5 * 0.01/0.02 = 1.25;
    # problem 2: failed 1/2 -> 0.5, no bonus; ET 0.04 vs reference 0.01 -> 1 + 0.5 * 0.25 = 1.125
    assert reward.rewards_of(results, (2, 1, 2), args, ref).flatten().tolist() == pytest.approx([1.5, 1.25, 0.5, 1.125])
    # a program faster than its reference earns lambda, not more: ET 0.005 vs 0.01 -> 1 + 0.5
    fast = [results[0], results[1], results[2], R("passed", 2, (0.002, 0.003))]
    assert reward.rewards_of(fast, (2, 1, 2), args, ref).flatten()[3].item() == pytest.approx(1.5)
    args = train.get_args(["--reward", "all_pass"])
    assert reward.rewards_of(results, (2, 1, 2), args).flatten().tolist() == [1.0, 1.0, 0.0, 1.0]
    # the released form, lambda 1: 0.05 s and 10 MiB -> 1 + 0.1 e^-0.15 + 0.1 e^-1 = 1.122859; failing: 0.5, no bonus
    args = train.get_args(["--efficiency-weight", "1", "--efficiency-reward", "release"])
    got = reward.rewards_of([R("passed", 2, (0.05,), 10.0), R("failed", 1, (0.0,))], (1, 1, 2), args)
    assert got.flatten().tolist() == pytest.approx([1.122859, 0.5], abs=1e-6)


def test_docstring_example_three_token_clipped_loss():  # the worked example of grpo_loss's docstring
    """rho = [0.5, 1, 1.5], w = 1/3, eps 0.2 / 0.28: L = -0.926667 (A = +1) and 1.1 (A = -1).
    Catches: clipping both sides with eps_low (A = +1 would give -(0.5 + 1 + 1.2) / 3 = -0.9),
    unclipped surrogate (-1.0 and 1.0), a per-sequence sum instead of token weights (x3)."""
    old = torch.zeros(1, 3)
    logp = torch.log(torch.tensor([[0.5, 1.0, 1.5]]))
    w = torch.full((1, 3), 1 / 3)
    pos, _ = grpo.grpo_loss(logp, old, logp, torch.tensor([1.0]), w, 0.2, 0.28, beta=0.0)
    neg, _ = grpo.grpo_loss(logp, old, logp, torch.tensor([-1.0]), w, 0.2, 0.28, beta=0.0)
    assert pos.item() == pytest.approx(-(0.5 + 1 + 1.28) / 3, rel=1e-6)  # -0.926667
    assert neg.item() == pytest.approx((0.8 + 1 + 1.5) / 3, rel=1e-6)  # 1.1
    sym, _ = grpo.grpo_loss(logp, old, logp, torch.tensor([1.0]), w, 0.2, None, beta=0.0)
    assert sym.item() == pytest.approx(-(0.5 + 1 + 1.2) / 3, rel=1e-6)  # epsilon_high defaults to epsilon


def test_docstring_example_two_plans_two_codes():  # the worked example of grpo.py's module docstring
    """r = [[1, 0], [0, 0]]. Catches: a Coder baseline over the whole problem when 'plan' is asked
    (gives 1.73165 / -0.57722), a Planner credited with the sum (R^P = [1, 0] -> 0.9998 under
    'mean'), std with Bessel's correction (0.5/0.7072 = 0.70701), std added without EPS."""
    r = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    ok, plan_ok = torch.ones(1, 2, 2, dtype=torch.bool), torch.ones(1, 2, dtype=torch.bool)
    a_c, z_c = grpo.coder_advantages(r, ok, "plan")
    assert a_c.flatten().tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0], rel=1e-6)
    assert a_c[0, 1].tolist() == [0.0, 0.0] and z_c.tolist() == [[False, True]]
    a_p, _ = grpo.planner_advantages(r, ok, plan_ok, "mean")
    assert a_p.flatten().tolist() == pytest.approx([0.25 / 0.2501, -0.25 / 0.2501], rel=1e-6)  # +-0.99960
    a_max, _ = grpo.planner_advantages(r, ok, plan_ok, "max")
    assert a_max.flatten().tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001], rel=1e-6)  # +-0.99980
    a_pb, _ = grpo.coder_advantages(r, ok, "problem")
    std = math.sqrt(0.1875)
    assert a_pb.flatten().tolist() == pytest.approx([0.75 / (std + 1e-4)] + [-0.25 / (std + 1e-4)] * 3, rel=1e-6)
    # --scale-rewards none (Dr. GRPO): r - mean, no division
    assert grpo.coder_advantages(r, ok, "plan", scale=False)[0].flatten().tolist() == [0.5, -0.5, 0.0, 0.0]
    assert grpo.planner_advantages(r, ok, plan_ok, "mean", scale=False)[0].flatten().tolist() == [0.25, -0.25]
    with pytest.raises(ValueError):
        grpo.planner_advantages(r, ok, plan_ok, "sum")
    with pytest.raises(ValueError):
        grpo.coder_advantages(r, ok, "plans")


def test_empty_plan_or_code_does_not_change_the_others():  # docs/algorithm.md#an-empty-sibling-shifts-the-group-baseline
    """Planner group [1, 0, <empty plan>] and a Coder group with an empty code must give the others the
    advantages of the group without it. Catches: an empty completion scored as reward 0 in the mean
    (plans would get 0.6667/-0.3333 -> different A)."""
    r = torch.tensor([[[1.0, 1.0], [0.0, 0.0], [0.0, 0.0]]])
    ok = torch.ones(1, 3, 2, dtype=torch.bool)
    with_empty, _ = grpo.planner_advantages(r, ok, torch.tensor([[True, True, False]]))
    without, _ = grpo.planner_advantages(r[:, :2], ok[:, :2], torch.tensor([[True, True]]))
    assert with_empty[0, :2].tolist() == without[0].tolist() and with_empty[0, 2].item() == 0.0
    code_ok = torch.tensor([[[True, True, False]]])
    a, _ = grpo.coder_advantages(torch.tensor([[[1.0, 0.0, 0.0]]]), code_ok)
    b, _ = grpo.coder_advantages(torch.tensor([[[1.0, 0.0]]]), torch.ones(1, 1, 2, dtype=torch.bool))
    assert a[0, 0, :2].tolist() == b[0, 0].tolist() and a[0, 0, 2].item() == 0.0


def test_token_logprobs_gradient_is_softmax_not_one_hot():
    """d log p(tok) / dz = onehot(tok) - softmax(z): with softmax [1/4, 3/4] and tok = 1 the gradient is
    [-1/4, 1/4]; with [1/2, 1/2] and tok = 0 it is [1/2, -1/2]. Catches: logsumexp(...).detach() (values
    right, gradient = the one-hot [0, 1] and [1, 0]: the policy gradient would push every logit of the
    sampled token up with nothing pushing the others down)."""
    logits = torch.tensor([[[0.0, math.log(3.0)], [5.0, 5.0]]], requires_grad=True)
    grpo.token_logprobs(logits, torch.tensor([[1, 0]])).sum().backward()
    assert torch.allclose(logits.grad, torch.tensor([[[-0.25, 0.25], [0.5, -0.5]]]), atol=1e-6)


def test_token_logprobs_match_log_softmax_gather_with_gradient():
    """Independent autograd reference: log_softmax then gather, on random logits [2, 3, 7] with a random
    weighted sum (as in the loss). Values and gradients must agree. Catches: .detach() on the
    normaliser, a softmax (probabilities, not log-probs), logsumexp over the wrong dim."""
    torch.manual_seed(0)
    z = (3 * torch.randn(2, 3, 7)).requires_grad_()
    tokens = torch.randint(0, 7, (2, 3))
    w = torch.randn(2, 3)
    ours = grpo.token_logprobs(z, tokens)
    (g_ours,) = torch.autograd.grad((ours * w).sum(), z)
    ref = torch.log_softmax(z, dim=-1).gather(-1, tokens[..., None])[..., 0]
    (g_ref,) = torch.autograd.grad((ref * w).sum(), z)
    assert torch.allclose(ours, ref, atol=1e-5) and torch.allclose(g_ours, g_ref, atol=1e-6)


def test_token_logprobs_are_float32_for_bf16_logits():
    """bf16 logits (a bf16 model) -> float32 log-probs equal to the float32 computation. Catches: no
    upcast (bf16 logsumexp loses ~3 digits; the ratio exp(logp - old) would be noisy at rho = 1)."""
    torch.manual_seed(1)
    z = torch.randn(2, 4, 11).to(torch.bfloat16)
    tokens = torch.randint(0, 11, (2, 4))
    lp = grpo.token_logprobs(z, tokens)
    assert lp.dtype == torch.float32
    assert torch.allclose(lp, torch.log_softmax(z.float(), -1).gather(-1, tokens[..., None])[..., 0], atol=1e-6)


def test_planner_credit_uses_valid_codes_only_and_drops_plans_without_any():
    """Plan 1: codes [1, <empty>], plan 2: [0.5, 0.25], plan 3: both codes empty (rewards 0).
    mean credit: R^P = [1, 0.375] over plans 1-2 (plan 3 out): mean 0.6875, std 0.3125 -> +-0.3125/0.3126.
    max credit:  R^P = [1, 0.5]: mean 0.75, std 0.25 -> +-0.25/0.2501.
    Catches: the mean over ALL codes (R^P = [0.5, 0.375] -> +-0.0625/0.0626 = +-0.99840), and a plan
    with no valid code kept in its group (R^P = [1, 0.375, 0]: a group of 3, plan 3 punished)."""
    r = torch.tensor([[[1.0, 0.0], [0.5, 0.25], [0.0, 0.0]]])
    ok = torch.tensor([[[True, False], [True, True], [False, False]]])
    plan_ok = torch.ones(1, 3, dtype=torch.bool)
    a_mean, zero = grpo.planner_advantages(r, ok, plan_ok, "mean")
    assert a_mean[0].tolist() == pytest.approx([0.3125 / 0.3126, -0.3125 / 0.3126, 0.0], rel=1e-6)
    assert zero.tolist() == [False]
    a_max, _ = grpo.planner_advantages(r, ok, plan_ok, "max")
    assert a_max[0].tolist() == pytest.approx([0.25 / 0.2501, -0.25 / 0.2501, 0.0], rel=1e-6)


def test_coder_problem_baseline_leaves_invalid_codes_out():
    """Plan 1 codes [1, 0], plan 2 codes [0.5, <empty>]. 'problem': the valid group {1, 0, 0.5} has mean
    0.5 and std sqrt(1/6) = 0.408248 -> [0.5/0.408348, -0.5/0.408348, 0, 0] (the 0.5 sits exactly on the
    mean). 'plan': plan 1 -> +-0.5/0.5001, plan 2 has one valid code -> 0, 0. Catches: the empty code
    counted in the problem's group (mean 0.375: the 0.5 code would get +0.30), advantages reshaped
    back in the wrong order."""
    r = torch.tensor([[[1.0, 0.0], [0.5, 0.0]]])
    ok = torch.tensor([[[True, True], [True, False]]])
    s = math.sqrt(1 / 6) + 1e-4
    a, zero = grpo.coder_advantages(r, ok, "problem")
    assert a.flatten().tolist() == pytest.approx([0.5 / s, -0.5 / s, 0.0, 0.0], rel=1e-6, abs=1e-7)
    assert zero.tolist() == [False]
    a_plan, zero_plan = grpo.coder_advantages(r, ok, "plan")
    assert a_plan.flatten().tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0], rel=1e-6)
    assert zero_plan.tolist() == [[False, True]]


def test_dr_grpo_divides_by_max_len_not_by_the_batch_width():
    """Batch width 3 but token budget max_len = 8, 2 non-empty rows: w = 1 / (2 * 8) = 1/16 per token,
    summing to 3/16 (a constant normaliser: the loss scale does not depend on how long this batch's
    completions happen to be). Without max_len the width is used: 1 / (2 * 3). Catches: the batch's
    width (1/6) used even when max_len is given, the empty row counted (1/24)."""
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0], [0.0, 0.0, 0.0]])
    w = grpo.loss_weights(mask, "dr_grpo", max_len=8)
    assert torch.allclose(w, mask / 16, atol=1e-8) and w.sum().item() == pytest.approx(3 / 16)
    assert torch.allclose(grpo.loss_weights(mask, "dr_grpo"), mask / 6, atol=1e-8)


def test_coder_advantages_docstring_example_alone():
    """The module docstring's Coder numbers, without the Planner: r = [[1, 0], [0, 0]]. 'plan' -> plan 1
    +-0.5/0.5001, plan 2 exactly 0; 'problem' -> 0.75/0.43311 and -0.25/0.43311; scale=False -> r - mean.
    Catches: the problem's group used for 'plan' (1.73165 for the first code), the scale flag ignored
    in the 'plan' branch (0.99980 instead of 0.5), an unknown baseline accepted."""
    r = torch.tensor([[[1.0, 0.0], [0.0, 0.0]]])
    ok = torch.ones(1, 2, 2, dtype=torch.bool)
    a, zero = grpo.coder_advantages(r, ok, "plan")
    assert a.flatten().tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, 0.0, 0.0], rel=1e-6)
    assert zero.tolist() == [[False, True]]
    s = math.sqrt(0.1875) + 1e-4
    assert grpo.coder_advantages(r, ok, "problem")[0].flatten().tolist() == pytest.approx([0.75 / s] + [-0.25 / s] * 3, rel=1e-6)
    assert grpo.coder_advantages(r, ok, "plan", scale=False)[0].flatten().tolist() == [0.5, -0.5, 0.0, 0.0]
    assert grpo.coder_advantages(r, ok, "problem", scale=False)[0].flatten().tolist() == [0.75, -0.25, -0.25, -0.25]
    with pytest.raises(ValueError, match="unknown coder baseline"):
        grpo.coder_advantages(r, ok, "plans")


@pytest.mark.parametrize("value,k", [(0.9, 3), (0.1, 7)])
def test_equal_rewards_with_rounding_give_exactly_zero(value, k):  # docs/algorithm.md#equal-rewards-give-nan-or-non-zero-advantages
    """k equal float32 rewards whose mean rounds away from them (3 x 0.9: r - mean = 6e-8; 7 x 0.1: -7e-9):
    the advantages must still be exactly 0. Catches: zero-variance groups detected by the std and not
    zeroed (6e-8 / (std + 1e-4) = 6e-4: a group without signal would train on rounding noise)."""
    r = torch.full((1, k), value)
    assert (r - r.sum(-1, keepdim=True) / k).abs().max() > 0  # the fixture really rounds
    adv, zero = grpo.group_advantages(r, torch.ones(1, k, dtype=torch.bool))
    assert torch.equal(adv, torch.zeros(1, k)) and zero.tolist() == [True]


# --- the rollout tree: one credit rule for every level ---------------------------------------------

# node ids: 0 problem | 1, 2 retrievals | 3, 4 plans of r1, 5, 6 plans of r2 | 7..14 codes (2 per plan)
THREE_LEVEL_PARENT = torch.tensor([-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6])
THREE_LEVEL_R = torch.tensor([0.0] * 7 + [1, 0, 0, 1, 1, 0, 0.25, 0])  # code 12 is the empty one
THREE_LEVEL_OK = torch.tensor([True] * 12 + [False] + [True] * 2)


def test_docstring_example_three_level_tree():
    """grpo.py's module docstring, "Tree": retriever -> planner -> coder with one zero-variance group (r1's
    plans) and one empty sibling (p21's second code). Catches: a mean of the children's means (r2 = 0.5625:
    the retrievers' signs flip), the empty code counted as 0 (p21 = 0.5: r2's plans would be [0.5, 0.125]
    -> A = +-0.99947, and r2 = 0.3125), groups by level instead of by parent (the four plans in one group:
    p11 would get -0.03125 / 0.31103 = -0.10047 instead of 0), a zero-variance group left non-zero."""
    R, A, zero = grpo.tree_advantages(THREE_LEVEL_R, THREE_LEVEL_OK, THREE_LEVEL_PARENT, "mean")
    assert R[1:7].tolist() == pytest.approx([0.5, 1.25 / 3, 0.5, 0.5, 1.0, 0.125], rel=1e-6)
    d = 0.5 - (0.5 + 1.25 / 3) / 2  # = 1/24
    assert A[1:3].tolist() == pytest.approx([d / (d + 1e-4), -d / (d + 1e-4)], rel=1e-6)  # +-0.99761
    assert A[3:5].tolist() == [0.0, 0.0] and zero[3:5].tolist() == [True, True]  # r1's plans: no spread
    assert A[5:7].tolist() == pytest.approx([0.4375 / 0.4376, -0.4375 / 0.4376], rel=1e-6)  # +-0.99977
    c = 0.5 / 0.5001
    assert A[7:].tolist() == pytest.approx([c, -c, -c, c, 0, 0, 0.125 / 0.1251, -0.125 / 0.1251], rel=1e-6)
    assert A[0].item() == 0.0 and zero[0].item()  # the problem itself is never trained


def test_three_level_tree_max_credit():
    """max credit on the same tree: r1 = max(1, 0, 0, 1) = 1 = r2 -> retrievers 0, 0; plans of r1 [1, 1] -> 0;
    r2's plans [1, 0.25]: mean 0.625, std 0.375 -> +-0.375 / 0.3751. Catches: max over the empty code's
    stored reward or a mean used under 'max'."""
    R, A, _ = grpo.tree_advantages(THREE_LEVEL_R, THREE_LEVEL_OK, THREE_LEVEL_PARENT, "max")
    assert R[1:7].tolist() == [1.0, 1.0, 1.0, 1.0, 1.0, 0.25]
    assert A[1:5].tolist() == [0.0] * 4
    assert A[5:7].tolist() == pytest.approx([0.375 / 0.3751, -0.375 / 0.3751], rel=1e-6)
    with pytest.raises(ValueError, match="unknown planner credit"):
        grpo.tree_advantages(THREE_LEVEL_R, THREE_LEVEL_OK, THREE_LEVEL_PARENT, "sum")


def test_empty_plan_leaves_its_codes_in_the_retrievers_credit():
    """An empty plan (node 6 invalid) is left out of its siblings' group, but its codes still count for the
    retriever above it (they were written and run). r2's plans: p21 alone -> 0, 0; r2 = 0.41667 as before.
    Catches: an empty plan kept in its group (p21 would get +0.99977), its codes dropped from r2."""
    ok = THREE_LEVEL_OK.clone()
    ok[6] = False
    R, A, zero = grpo.tree_advantages(THREE_LEVEL_R, ok, THREE_LEVEL_PARENT)
    assert R[2].item() == pytest.approx(1.25 / 3) and A[5:7].tolist() == [0.0, 0.0] and zero[5].item()


def test_two_level_case_is_bitwise_the_dense_formulas():
    """coder_advantages / planner_advantages (now the two-level tree) against the dense formulas written out
    here (an independent reference: the dense two-level formulas, written out here), on 200 random [B, G, M] with empty plans
    and codes; torch.equal, not approx. Catches: any change of today's numbers, e.g. padding that enters a
    mean, a different summation order, groups reassembled in the wrong order."""
    def dense_group(r, v, scale):
        vf = v.float()
        n = vf.sum(-1, keepdim=True)
        mean = (r * vf).sum(-1, keepdim=True) / n.clamp(min=1)
        std = (((r - mean) ** 2 * vf).sum(-1, keepdim=True) / n.clamp(min=1)).sqrt()
        spread = r.masked_fill(~v, -1e30).amax(-1) - r.masked_fill(~v, 1e30).amin(-1)
        z = (spread <= 0) | (n.squeeze(-1) < 2)
        a = (r - mean) / (std + 1e-4) if scale else r - mean
        return torch.where(v & ~z.unsqueeze(-1), a, torch.zeros_like(a)), z

    g = torch.Generator().manual_seed(0)
    for trial in range(200):
        B, G, M = (int(x) for x in torch.randint(1, 5, (3,), generator=g))
        r = torch.rand(B, G, M, generator=g) if trial % 2 else torch.randint(0, 3, (B, G, M), generator=g) / 2.0
        v, pv = torch.rand(B, G, M, generator=g) > 0.2, torch.rand(B, G, generator=g) > 0.2
        scale = trial % 4 < 2
        assert all(map(torch.equal, grpo.coder_advantages(r, v, "plan", scale), dense_group(r, v, scale)))
        a, z = dense_group(r.reshape(B, G * M), v.reshape(B, G * M), scale)
        assert all(map(torch.equal, grpo.coder_advantages(r, v, "problem", scale), (a.view(B, G, M), z)))
        vf = v.float()
        mean_credit = (r * vf).sum(-1) / vf.sum(-1).clamp(min=1)
        max_credit = r.masked_fill(~v, 0.0).amax(-1)
        for credit, rp in (("mean", mean_credit), ("max", max_credit)):
            want = dense_group(rp, pv & v.any(-1), scale)
            assert all(map(torch.equal, grpo.planner_advantages(r, v, pv, credit, scale), want))


def test_debugger_group_pass_rate_and_gain():
    """Two failing programs (pass rates 0.25 and 0), D = 3 repairs each; program 2's last repair has no code.
    Program 1, pass_rate r = [1, 0.25, 0.5]: mean 7/12, population std sqrt(0.0972222) = 0.311805
    -> A = [5/12, -4/12, -1/12] / 0.311905 = [1.335871, -1.068697, -0.267174]; gain r = [0.75, 0, 0.25],
    the same A (a constant shift per group). Program 2: [0.5, 0.5, -]: no spread -> 0, 0, 0.
    Catches: the repairs of all programs in one group (A of program 1 would change), the gain baseline
    taken from another program, the empty repair counted as 0 (program 2 would get +-0.7069)."""
    rep = torch.tensor([[1.0, 0.25, 0.5], [0.5, 0.5, 0.0]])
    ok = torch.tensor([[True, True, True], [True, True, False]])
    orig = torch.tensor([0.25, 0.0])
    s = math.sqrt(((5 / 12) ** 2 + (4 / 12) ** 2 + (1 / 12) ** 2) / 3) + 1e-4
    want = [5 / 12 / s, -4 / 12 / s, -1 / 12 / s]
    r, a, zero = grpo.debugger_advantages(rep, ok, orig, "pass_rate")
    assert r.tolist() == rep.tolist() and a[0].tolist() == pytest.approx(want, rel=1e-6)
    assert a[1].tolist() == [0.0, 0.0, 0.0] and zero.tolist() == [False, True]
    rg, ag, _ = grpo.debugger_advantages(rep, ok, orig, "gain")
    assert rg[0].tolist() == [0.75, 0.0, 0.25] and rg[1].tolist() == [0.5, 0.5, 0.0]
    assert ag[0].tolist() == pytest.approx(want, rel=1e-6) and ag[1].tolist() == [0.0, 0.0, 0.0]
    assert grpo.debugger_advantages(rep, ok, orig, "gain", scale=False)[1][0].tolist() == \
        pytest.approx([5 / 12, -4 / 12, -1 / 12], abs=1e-7)
    with pytest.raises(ValueError, match="unknown debug reward"):
        grpo.debugger_advantages(rep, ok, orig, "delta")
