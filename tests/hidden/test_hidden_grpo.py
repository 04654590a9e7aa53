"""Hidden tests of the grpo.py exercises (course/exercises.toml `hidden`): other inputs than the public
tests, numbers worked out by hand in the comments or by the plain-Python references below, so that a
solution fitted to the public tests' numbers fails here. Never shipped in the handout."""
import math
import random

import pytest
import torch

import grpo

# ---- plain-Python references (lists and floats, no torch): independent of the code under test ----

def ref_group(rewards, valid, scale=True):
    """A = (r - mean) / (pop std + 1e-4) over the valid members; exactly 0 when the valid rewards
    are all equal or fewer than 2 are valid, and for the invalid members."""
    vals = [r for r, v in zip(rewards, valid) if v]
    if len(vals) < 2 or max(vals) == min(vals):
        return [0.0] * len(rewards)
    mean = sum(vals) / len(vals)
    std = math.sqrt(sum((x - mean) ** 2 for x in vals) / len(vals))
    return [((r - mean) / (std + 1e-4) if scale else r - mean) if v else 0.0 for r, v in zip(rewards, valid)]


def ref_credit(rewards, valid, parent, credit="mean"):
    """Each node's credit (a leaf: its reward; an inner node: mean|max of the valid leaves below it)
    and whether it enters its sibling group (valid, and a leaf or with a valid leaf below)."""
    n = len(parent)
    children = {i: [j for j in range(n) if parent[j] == i] for i in range(n)}

    def leaves(i):
        return [i] if not children[i] else [x for c in children[i] for x in leaves(c)]
    R, ok = [], []
    for i in range(n):
        if not children[i]:
            R.append(rewards[i])
            ok.append(valid[i])
            continue
        below = [rewards[x] for x in leaves(i) if valid[x]]
        R.append((sum(below) / len(below) if credit == "mean" else max(below)) if below else 0.0)
        ok.append(valid[i] and bool(below))
    return R, ok


def ref_siblings(credit, ok, group, scale=True):
    A = [0.0] * len(credit)
    for g in sorted({g for g in group if g >= 0}):
        idx = [i for i, x in enumerate(group) if x == g]
        for i, a in zip(idx, ref_group([credit[i] for i in idx], [ok[i] for i in idx], scale)):
            A[i] = a
    return A


# ---- logprobs ------------------------------------------------------------------------------------

def test_hidden_token_logprobs_value_and_gradient():
    """logits log([1, 2, 5]): softmax [1/8, 2/8, 5/8]; token 2 -> log(5/8) = -0.470004, and
    d log p / dz = onehot - softmax = [-1/8, -2/8, 3/8]. Second position, logits [2, 2, 2], token 0:
    log(1/3), gradient [2/3, -1/3, -1/3]."""
    z = torch.tensor([[[0.0, math.log(2.0), math.log(5.0)], [2.0, 2.0, 2.0]]], requires_grad=True)
    lp = grpo.token_logprobs(z, torch.tensor([[2, 0]]))
    assert lp.tolist()[0] == pytest.approx([math.log(5 / 8), math.log(1 / 3)], abs=1e-6)
    lp.sum().backward()
    assert torch.allclose(z.grad, torch.tensor([[[-1 / 8, -2 / 8, 3 / 8], [2 / 3, -1 / 3, -1 / 3]]]), atol=1e-6)


def test_hidden_token_logprobs_bf16_in_float32_out():
    """bf16 logits [3, 5, 13] -> float32 log-probs of the bf16 values (the reference upcasts first)."""
    g = torch.Generator().manual_seed(7)
    z = (4 * torch.randn(3, 5, 13, generator=g)).to(torch.bfloat16)
    tokens = torch.randint(0, 13, (3, 5), generator=g)
    lp = grpo.token_logprobs(z, tokens)
    assert lp.dtype == torch.float32 and lp.shape == (3, 5)
    want = torch.log_softmax(z.float(), -1).gather(-1, tokens[..., None])[..., 0]
    assert torch.allclose(lp, want, atol=1e-6)


# ---- mask ----------------------------------------------------------------------------------------

def test_hidden_completion_mask_hand_rows():
    """eos 9, prompt width 2 (its 9 must not matter). Completions: [4, 9, 9, 9] -> [1, 1, 0, 0];
    [5, 6, 7, 8] never ends -> all ones, truncated; [9, 9, 9, 9] is empty -> [1, 0, 0, 0];
    [3, 3, 3, 9] -> all ones, not truncated."""
    seqs = torch.tensor([[9, 1, 4, 9, 9, 9],
                         [1, 2, 5, 6, 7, 8],
                         [0, 9, 9, 9, 9, 9],
                         [9, 9, 3, 3, 3, 9]])
    mask, truncated = grpo.completion_mask(seqs, 2, eos_id=9)
    assert mask.dtype == torch.float32
    assert mask.tolist() == [[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0], [1, 1, 1, 1]]
    assert truncated.tolist() == [False, True, False, False]


def test_hidden_completion_mask_matches_a_loop():
    """200 random rows against a loop: ones up to and including the first EOS, all ones without one."""
    g = torch.Generator().manual_seed(3)
    for _ in range(20):
        N, P, T = 10, int(torch.randint(0, 4, (1,), generator=g)), int(torch.randint(1, 8, (1,), generator=g))
        seqs = torch.randint(0, 4, (N, P + T), generator=g)  # eos 0 appears often, sometimes never
        mask, truncated = grpo.completion_mask(seqs, P, eos_id=0)
        for row, m, t in zip(seqs[:, P:].tolist(), mask.tolist(), truncated.tolist()):
            end = row.index(0) if 0 in row else T - 1
            assert m == [1.0 if i <= end else 0.0 for i in range(T)] and t == (0 not in row)


# ---- group_adv -----------------------------------------------------------------------------------

def test_hidden_group_advantages_hand_values():
    """Row 1: [0.5, 1, 0, <invalid 1>]: valid mean 0.5, population std sqrt(1/6) = 0.408248
    -> [0, 0.5 / 0.408348, -0.5 / 0.408348, 0] = [0, 1.224445, -1.224445, 0]; scale=False -> [0, 0.5, -0.5, 0].
    Row 2: six times 0.3 in float32 (r - mean = 3e-8 after rounding): exactly 0. Row 3: one valid: 0."""
    r = torch.tensor([[0.5, 1.0, 0.0, 1.0, 0.0, 0.0], [0.3] * 6, [0.2, 0.9, 0.4, 0.1, 0.0, 0.0]])
    valid = torch.tensor([[True, True, True, False, False, False], [True] * 6, [False, True] + [False] * 4])
    assert (r[1] - r[1].sum() / 6).abs().max() > 0  # the fixture really rounds
    s = math.sqrt(1 / 6) + 1e-4
    adv, zero = grpo.group_advantages(r, valid)
    assert adv[0].tolist() == pytest.approx([0, 0.5 / s, -0.5 / s, 0, 0, 0], rel=1e-6, abs=1e-7)
    assert torch.equal(adv[1:], torch.zeros(2, 6)) and zero.tolist() == [False, True, True]
    flat, _ = grpo.group_advantages(r, valid, scale=False)
    assert flat[0].tolist() == pytest.approx([0, 0.5, -0.5, 0, 0, 0], abs=1e-7)


def test_hidden_group_advantages_match_the_reference():
    """300 random groups (sizes 1-7, ties, invalid members, equal values that round) against ref_group."""
    rng = random.Random(11)
    for trial in range(300):
        K = rng.randint(1, 7)
        if trial % 3 == 0:
            r = [rng.choice([0.3, 0.45, 0.85, 0.15])] * K  # equal: must be exactly 0
        else:
            r = [rng.choice([0.0, 0.25, 0.5, 1.0, rng.random()]) for _ in range(K)]
        v = [rng.random() > 0.25 for _ in range(K)]
        scale = trial % 2 == 0
        adv, _ = grpo.group_advantages(torch.tensor([r]), torch.tensor([v]), scale)
        want = ref_group([float(x) for x in torch.tensor(r)], v, scale)  # the float32 values
        if max(want, key=abs) == 0:
            assert torch.equal(adv, torch.zeros(1, K)), (r, v)
        else:
            assert adv[0].tolist() == pytest.approx(want, rel=1e-4, abs=1e-5), (r, v)


# ---- coder_adv -----------------------------------------------------------------------------------

def test_hidden_coder_advantages_hand_values():
    """B = 1, G = 2, M = 3: plan 1 codes [1, 0.5, 0], plan 2 [0, <empty>, 0.5].
    'plan': plan 1 mean 0.5, std sqrt(1/6) -> [0.5, 0, -0.5] / 0.408348; plan 2 valid [0, 0.5] -> -+0.25/0.2501.
    'problem': valid {1, 0.5, 0, 0, 0.5}: mean 0.4, std sqrt(0.14) = 0.374166
    -> [0.6, 0.1, -0.4, -0.4, 0, 0.1] / 0.374266 (the empty code 0). scale=False: r - mean."""
    r = torch.tensor([[[1.0, 0.5, 0.0], [0.0, 1.0, 0.5]]])
    ok = torch.tensor([[[True, True, True], [True, False, True]]])
    s6 = math.sqrt(1 / 6) + 1e-4
    a, zero = grpo.coder_advantages(r, ok, "plan")
    assert a.flatten().tolist() == pytest.approx([0.5 / s6, 0, -0.5 / s6, -0.25 / 0.2501, 0, 0.25 / 0.2501],
                                                 rel=1e-6, abs=1e-7)
    assert zero.tolist() == [[False, False]]
    s = math.sqrt(0.14) + 1e-4
    a, zero = grpo.coder_advantages(r, ok, "problem")
    assert a.flatten().tolist() == pytest.approx([x / s for x in (0.6, 0.1, -0.4, -0.4, 0, 0.1)], rel=1e-5, abs=1e-6)
    assert zero.tolist() == [False]
    flat, _ = grpo.coder_advantages(r, ok, "problem", scale=False)
    assert flat.flatten().tolist() == pytest.approx([0.6, 0.1, -0.4, -0.4, 0, 0.1], abs=1e-6)
    with pytest.raises(ValueError):
        grpo.coder_advantages(r, ok, "group")


def test_hidden_sibling_advantages_groups_of_different_sizes():
    """Groups {0, 1} = [1, 0], {2, 3, 4} = [0.25, 0.75, 0.5], node 5 in no group (-1), node 6 alone.
    Group 2: mean 0.5, std sqrt(1/24) = 0.204124 -> [-0.25, 0.25, 0] / 0.204224."""
    credit = torch.tensor([1.0, 0.0, 0.25, 0.75, 0.5, 0.3, 0.9])
    ok = torch.ones(7, dtype=torch.bool)
    group = torch.tensor([4, 4, 9, 9, 9, -1, 2])
    a, zero = grpo.sibling_advantages(credit, ok, group)
    s = math.sqrt(1 / 24) + 1e-4
    assert a.tolist() == pytest.approx([0.5 / 0.5001, -0.5 / 0.5001, -0.25 / s, 0.25 / s, 0, 0, 0], rel=1e-6, abs=1e-7)
    assert zero.tolist() == [False, False, False, False, False, True, True]
    a, _ = grpo.sibling_advantages(credit, ok, group, scale=False)
    assert a.tolist() == pytest.approx([0.5, -0.5, -0.25, 0.25, 0, 0, 0], abs=1e-7)


def test_hidden_coder_advantages_match_the_reference():
    """100 random [B, G, M] with empty codes, both baselines, scale on and off, against ref_siblings."""
    g = torch.Generator().manual_seed(5)
    for trial in range(100):
        B, G, M = (int(x) for x in torch.randint(1, 4, (3,), generator=g))
        r = torch.randint(0, 5, (B, G, M), generator=g) / 4.0
        v = torch.rand(B, G, M, generator=g) > 0.2
        scale = trial % 2 == 0
        for baseline in ("plan", "problem"):
            group = [(b * G + i if baseline == "plan" else b) for b in range(B) for i in range(G) for _ in range(M)]
            want = ref_siblings(r.flatten().tolist(), v.flatten().tolist(), group, scale)
            got, _ = grpo.coder_advantages(r, v, baseline, scale)
            assert got.flatten().tolist() == pytest.approx(want, rel=1e-5, abs=1e-6)


# ---- planner_adv ---------------------------------------------------------------------------------

def test_hidden_planner_advantages_hand_values():
    """G = 4 plans x M = 2 codes: plan 1 [0.5, <empty, stored 1>], plan 2 [1, 0.5], plan 3 [0, 0],
    plan 4 empty itself (its codes [1, 1] do not make it count), plan 5 none of whose codes is valid.
    mean credit: plans 1-3 R = [0.5, 0.75, 0]: mean 5/12, std sqrt(0.097222) = 0.311805
    -> [1/12, 4/12, -5/12] / 0.311905; max credit: R = [0.5, 1, 0]: mean 0.5, std sqrt(1/6)
    -> [0, 0.5, -0.5] / 0.408348. Plans 4 and 5: 0."""
    r = torch.tensor([[[0.5, 1.0], [1.0, 0.5], [0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]])
    ok = torch.tensor([[[True, False], [True, True], [True, True], [True, True], [False, False]]])
    plan_ok = torch.tensor([[True, True, True, False, True]])
    s = math.sqrt(((1 / 12) ** 2 + (4 / 12) ** 2 + (5 / 12) ** 2) / 3) + 1e-4
    a, zero = grpo.planner_advantages(r, ok, plan_ok, "mean")
    assert a[0].tolist() == pytest.approx([1 / 12 / s, 4 / 12 / s, -5 / 12 / s, 0, 0], rel=1e-6, abs=1e-7)
    assert zero.tolist() == [False]
    s = math.sqrt(1 / 6) + 1e-4
    a, _ = grpo.planner_advantages(r, ok, plan_ok, "max")
    assert a[0].tolist() == pytest.approx([0, 0.5 / s, -0.5 / s, 0, 0], rel=1e-6, abs=1e-7)
    with pytest.raises(ValueError):
        grpo.planner_advantages(r, ok, plan_ok, "median")


def test_hidden_node_credit_on_a_three_level_tree():
    """0 root | 1, 2 retrievals | 3 (under 1), 4, 5 (under 2) plans | codes: 6, 7 under 3; 8 under 4;
    9, 10, 11 under 5 (10 empty). Rewards 6: 1, 7: 0.5, 8: 0, 9: 0.25, 10: 1 (empty), 11: 0.75.
    mean: plan 3 = 0.75, plan 4 = 0, plan 5 = 0.5, retrieval 1 = 0.75, retrieval 2 = (0 + 0.25 + 0.75) / 3
    = 1/3 (the valid leaves below, not the mean of its plans' 0 and 0.5), root (1 + 0.5 + 0 + 0.25 + 0.75) / 5 = 0.5.
    max: plan 3 = 1, plan 4 = 0, plan 5 = 0.75, retrievals 1 and 0.75."""
    parent = torch.tensor([-1, 0, 0, 1, 2, 2, 3, 3, 4, 5, 5, 5])
    rewards = torch.tensor([0.0] * 6 + [1.0, 0.5, 0.0, 0.25, 1.0, 0.75])
    valid = torch.tensor([True] * 10 + [False, True])
    R, ok = grpo.node_credit(rewards, valid, parent, "mean")
    assert R[:6].tolist() == pytest.approx([0.5, 0.75, 1 / 3, 0.75, 0.0, 0.5], rel=1e-6)
    assert R[6:].tolist() == rewards[6:].tolist() and ok.tolist() == [True] * 10 + [False, True]
    R, _ = grpo.node_credit(rewards, valid, parent, "max")
    assert R[1:6].tolist() == [1.0, 0.75, 1.0, 0.0, 0.75]
    with pytest.raises(ValueError):
        grpo.node_credit(rewards, valid, parent, "sum")


def test_hidden_node_credit_matches_the_reference():
    """80 random two- and three-level trees with empty nodes, mean and max, against ref_credit."""
    rng = random.Random(2)
    for trial in range(80):
        parent = [-1]
        levels = [[0]]
        for _ in range(rng.choice([2, 3])):
            nxt = []
            for p in levels[-1]:
                for _ in range(rng.randint(1, 3)):
                    parent.append(p)
                    nxt.append(len(parent) - 1)
            levels.append(nxt)
        n = len(parent)
        rewards = [rng.choice([0.0, 0.25, 0.5, 1.0]) for _ in range(n)]
        valid = [i == 0 or rng.random() > 0.25 for i in range(n)]
        credit = "mean" if trial % 2 else "max"
        R, ok = grpo.node_credit(torch.tensor(rewards), torch.tensor(valid), torch.tensor(parent), credit)
        want_R, want_ok = ref_credit(rewards, valid, parent, credit)
        inner = [i for i in range(n) if i in parent]
        assert [R[i].item() for i in inner] == pytest.approx([want_R[i] for i in inner], rel=1e-6)
        assert ok.tolist()[1:] == want_ok[1:]


# ---- loss_weights --------------------------------------------------------------------------------

def test_hidden_loss_weights_hand_values():
    """Rows of 3, 1, 0 (excluded) and 2 tokens, width 4: N = 3 sequences, 6 tokens.
    token: 1/6 each; grpo: 1 / (len_i * 3) -> 1/9, 1/3, -, 1/6; dr_grpo (max_len 10): 1 / (3 * 10);
    dr_grpo without max_len: the width, 1 / (3 * 4)."""
    mask = torch.tensor([[1.0, 1, 1, 0], [1, 0, 0, 0], [0, 0, 0, 0], [1, 1, 0, 0]])
    close = lambda got, want: torch.allclose(got, want, atol=1e-7)  # noqa: E731
    assert close(grpo.loss_weights(mask, "token"), mask / 6)
    assert close(grpo.loss_weights(mask, "grpo"), mask * torch.tensor([[1 / 9], [1 / 3], [0.0], [1 / 6]]))
    assert close(grpo.loss_weights(mask, "dr_grpo", max_len=10), mask / 30)
    assert close(grpo.loss_weights(mask, "dr_grpo"), mask / 12)
    assert grpo.loss_weights(mask, "token").sum().item() == pytest.approx(1.0)
    assert grpo.loss_weights(mask, "grpo").sum().item() == pytest.approx(1.0)
    with pytest.raises(ValueError):
        grpo.loss_weights(mask, "mean")


def test_hidden_loss_weights_split_rows_add_up():
    """The weights of the whole batch, sliced into micro-batches of rows, are the full batch's: a
    micro-batch's loss sum(w * x) over its rows adds up to the full loss (random masks, each type)."""
    g = torch.Generator().manual_seed(9)
    mask = (torch.rand(6, 5, generator=g) > 0.4).float()
    mask[2] = 0  # one excluded row
    x = torch.randn(6, 5, generator=g)
    lens = mask.sum(1)
    n = int((lens > 0).sum())
    for kind, want in (("token", mask / mask.sum()), ("grpo", mask / lens.clamp(min=1)[:, None] / n),
                       ("dr_grpo", mask / (n * 7))):
        w = grpo.loss_weights(mask, kind, max_len=7)
        assert torch.allclose(w, want, atol=1e-7)
        assert sum((w[i:i + 2] * x[i:i + 2]).sum() for i in range(0, 6, 2)).item() == pytest.approx((w * x).sum().item(), abs=1e-6)


# ---- surrogate -----------------------------------------------------------------------------------

def test_hidden_grpo_loss_two_rows_hand_values():
    """old = 0, rho = [[1.4, 0.6], [1.1, 0.7]], A = [+2, -1], eps 0.1 / eps_high 0.3, w = 1/4, beta 0.05,
    ref - logp = -ln 3 -> k3 = 1/3 + ln 3 - 1 = 0.431946 on every token.
    Row 1: min(2.8, 2 * 1.3) = 2.6, min(1.2, 2 * 0.9) = 1.2; row 2: min(-1.1, -1.1) = -1.1, min(-0.7, -0.9) = -0.9.
    L = -(1/4 (2.6 + 1.2 - 1.1 - 0.9) - 0.05 * 0.431946) = -0.428403. clip_frac 3/4, ratio mean 0.95."""
    rho = torch.tensor([[1.4, 0.6], [1.1, 0.7]])
    logp = torch.log(rho)
    ref = logp - math.log(3.0)
    k3 = 1 / 3 + math.log(3.0) - 1
    w = torch.full((2, 2), 0.25)
    loss, m = grpo.grpo_loss(logp, torch.zeros(2, 2), ref, torch.tensor([2.0, -1.0]), w, 0.1, 0.3, beta=0.05)
    assert loss.item() == pytest.approx(-(0.25 * 1.8 - 0.05 * k3), rel=1e-5)
    assert m["clip_frac"] == pytest.approx(0.75) and m["ratio"] == pytest.approx(0.95, rel=1e-6)
    assert m["kl"] == pytest.approx(k3, rel=1e-5)
    sym, _ = grpo.grpo_loss(logp, torch.zeros(2, 2), ref, torch.tensor([2.0, -1.0]), w, 0.1, beta=0.0)
    # eps_high = eps_low = 0.1: row 1 first token min(2.8, 2.2) = 2.2 -> L = -(2.2 + 1.2 - 1.1 - 0.9) / 4
    assert sym.item() == pytest.approx(-1.4 / 4, rel=1e-5)


def test_hidden_grpo_loss_gradient_is_minus_w_a():
    """rho = 1 (old = logp.detach()), ref = logp.detach(), beta 0.1: the KL and its gradient are 0,
    so dL/dlogp_t = -w_t A = [[0.3, 0.45, 0]] for A = -1.5, w = [0.2, 0.3, 0]."""
    logp = torch.tensor([[-0.3, -1.2, -2.0]], requires_grad=True)
    loss, m = grpo.grpo_loss(logp, logp.detach(), logp.detach(), torch.tensor([-1.5]), torch.tensor([[0.2, 0.3, 0.0]]),
                             beta=0.1)
    assert loss.item() == pytest.approx(0.75) and m["kl"] == 0.0 and m["ratio"] == 1.0
    loss.backward()
    assert torch.allclose(logp.grad, torch.tensor([[0.3, 0.45, 0.0]]), atol=1e-7)
