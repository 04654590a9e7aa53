"""Collaboration-aware GRPO: the math only, pure functions on tensors.

One problem x gives a tree of rollouts (shapes for B problems, G plans each, M codes per plan):

    x --Planner--> p_1..p_G --Coder--> c_i1..c_iM --sandbox--> r_ij in [0, 1]     r: [B, G, M]

Advantages (our reading of CoRe-Code's "collaboration-aware" credit, docs/algorithm.md#how-the-loss-works):
    Coder   A^C_ij = (r_ij - mean_j r_i.) / (std_j r_i. + eps)    baseline = codes of the SAME plan
    Planner R^P_i  = mean_j r_ij  (or max_j r_ij: --planner-credit max; or, the authors' release,
                     sum_j softmax(s_i./T)_j s_ij + 0.1 if no test errored: --planner-credit softmax),
            A^P_i  = (R^P_i - mean_i R^P) / (std_i R^P + eps)
    --scale-rewards none drops the division by (std + eps) (Dr. GRPO, Liu et al. 2025, sec. 3.1).
Worked example (test_grpo.py checks it), one problem, G = 2 plans x M = 2 codes, r = [[1, 0], [0, 0]]:
    Coder, plan 1: mean 0.5, std 0.5 -> A^C_1. = +-0.5 / 0.5001 = +-0.99980; plan 2: all equal -> 0, 0
    Planner, mean credit: R^P = [0.5, 0], mean 0.25, std 0.25 -> A^P = +-0.25 / 0.2501 = +-0.99960
    Planner, max credit:  R^P = [1, 0],   mean 0.5,  std 0.5  -> A^P = +-0.99980
    Coder, --coder-baseline problem: one group [1, 0, 0, 0], mean 0.25, std 0.43301
                                     -> A = 0.75 / 0.43311 = 1.73165 and -0.25 / 0.43311 = -0.57722
Tree (`tree_advantages`, THE credit rule of every level, the one training calls; the above is its
two-level case):
    one problem is the root of a tree  [Retriever x R] -> Planner x G -> Coder x M  (levels optional but
    the Coder). A node's reward is the mean (--credit mean) or max of the rewards of the VALID final
    programs below it (at any depth: not a mean of means); its advantage is normalised among its
    siblings (same parent). A sibling group without spread, or with < 2 valid members, gets exactly 0;
    an empty sibling is left out of its group's mean and std (and of every credit above it).
    The Debugger is a depth-1 forest of its own: the D repairs of one failing program are one group
    (`debugger_advantages`); the Coder keeps its pre-repair reward.
Worked example (test_grpo.py checks it), one problem, R = 2 retrievals x G = 2 plans x M = 2 codes,
code rewards ("-" = an empty code):   r1: p11 [1, 0]  p12 [0, 1]     r2: p21 [1, -]  p22 [0.25, 0]
    Coder   p11 +-0.5 / 0.5001 = +-0.99980, p12 -+0.99980, p21 one valid code -> 0, 0,
            p22 mean 0.125, std 0.125 -> +-0.125 / 0.1251 = +-0.99920
    Planner R^P = p11 0.5, p12 0.5 | p21 1 (the empty code left out; counted as 0 it would be 0.5), p22 0.125
            r1's plans [0.5, 0.5]: no spread -> 0, 0 (the zero-variance group)
            r2's plans [1, 0.125]: mean 0.5625, std 0.4375 -> +-0.4375 / 0.4376 = +-0.99977
    Retriever R = mean of the valid codes below: r1 (1 + 0 + 0 + 1) / 4 = 0.5, r2 (1 + 0.25 + 0) / 3 = 0.41667
            mean 0.45833, std 1/24 -> +-(1/24) / (1/24 + 1e-4) = +-0.99761 (r1 up, r2 down; a mean of its
            plans' means would make r2 0.5625 > r1 and flip both signs)
Loss per role (DeepSeekMath, Shao et al. 2024, sec. 4.1; token-level sum and clip-higher: DAPO,
Yu et al. 2025, sec. 3.1/3.3; k3 KL estimator: Schulman 2020, "Approximating KL divergence"):
    rho_t = exp(logp_t - logp_old_t)
    KL_t  = exp(logp_ref_t - logp_t) - (logp_ref_t - logp_t) - 1
    L     = - sum_{seq,t} w_t [ min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) - beta KL_t ]
with weights w from `loss_weights` (they sum to 1 over the whole step for 'token' and 'grpo').
The efficiency bonus added to a fast correct program's reward is reward.efficiency_bonus.
"""
import torch

EPS = 1e-4  # added to std: DeepSeekMath uses a small constant; ours keeps A finite for tiny std


def token_logprobs(logits: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[token] without materialising the full log-softmax.

    logits: [N, T, V] (the logits that PREDICT tokens, i.e. already shifted), tokens: [N, T]
    -> [N, T] float32 log-probs. Equation: log p(v) = z_v - logsumexp(z).
    """
    # BEGIN SOLUTION logprobs
    logits = logits.float()
    picked = logits.gather(-1, tokens.unsqueeze(-1)).squeeze(-1)  # [N, T]
    return picked - torch.logsumexp(logits, dim=-1)  # [N, T]
    # END SOLUTION


def completion_mask(seqs: torch.Tensor, prompt_len: int, eos_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Mask of completion tokens, built from POSITIONS, never from `seqs != pad_id`.

    seqs: [N, L] = left-padded prompt (width prompt_len) + sampled completion (+ padding after the
    end). A completion runs from position prompt_len up to and including its first EOS; after
    that come pads (pad == EOS for many chat models: comparing ids would drop the real EOS).
    Returns (mask [N, L - prompt_len] float 0/1, truncated [N] bool: no EOS was sampled).

    >>> completion_mask(torch.tensor([[0, 5, 6, 2, 2], [5, 5, 7, 8, 9]]), 2, eos_id=2)[0]
    tensor([[1., 1., 0.],
            [1., 1., 1.]])
    """
    # BEGIN SOLUTION mask
    comp = seqs[:, prompt_len:]  # [N, T]
    T = comp.shape[1]
    is_eos = comp == eos_id  # [N, T]
    truncated = ~is_eos.any(dim=1)  # [N]
    first_eos = torch.where(truncated, T - 1, is_eos.int().argmax(dim=1))  # [N]
    pos = torch.arange(T, device=seqs.device)  # [T]
    mask = (pos[None, :] <= first_eos[:, None]).float()  # [N, T]
    return mask, truncated
    # END SOLUTION


def group_advantages(rewards: torch.Tensor, valid: torch.Tensor, scale: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """Normalise rewards inside each group (the last dim): A = (r - mean) / (std + EPS).

    scale=False gives A = r - mean (Dr. GRPO, sec. 3.1: dividing by std up-weights groups that are
    almost all-right or all-wrong).
    rewards, valid: [..., K] (valid: bool; invalid samples, e.g. empty completions, are left out
    of mean and std so they do not shift their siblings' baseline, and get A = 0).
    std is the population std (divide by the number of valid samples; our choice: a group {1, 0}
    then gets A = +-0.9998, not +-0.707). A group whose valid rewards are all equal (or that has
    fewer than 2 valid samples) carries no signal: its advantages are EXACTLY 0.
    Returns (advantages [..., K], zero_std [...] bool).

    >>> group_advantages(torch.tensor([[1., 0.], [1., 1.]]), torch.ones(2, 2, dtype=torch.bool))[0]
    tensor([[ 0.9998, -0.9998],
            [ 0.0000,  0.0000]])
    """
    # BEGIN SOLUTION group_adv
    v = valid.float()
    n = v.sum(-1, keepdim=True)  # [..., 1]
    mean = (rewards * v).sum(-1, keepdim=True) / n.clamp(min=1)
    std = (((rewards - mean) ** 2 * v).sum(-1, keepdim=True) / n.clamp(min=1)).sqrt()
    big, small = torch.finfo(rewards.dtype).max, torch.finfo(rewards.dtype).min
    spread = rewards.masked_fill(~valid, small).amax(-1) - rewards.masked_fill(~valid, big).amin(-1)
    zero_std = (spread <= 0) | (n.squeeze(-1) < 2)  # [...]; exact test, not std < tol
    adv = (rewards - mean) / (std + EPS) if scale else rewards - mean
    adv = torch.where(valid & ~zero_std.unsqueeze(-1), adv, torch.zeros_like(adv))
    return adv, zero_std
    # END SOLUTION


def two_level_tree(B: int, G: int, M: int) -> torch.Tensor:
    """parent [B + B*G + B*G*M] of the Planner -> Coder forest, in the rollouts' prompt-major order:
    nodes 0..B-1 are the problems (roots, -1), then plan b*G+i (node B + b*G + i, under problem b),
    then code (b*G+i)*M+j (node B + B*G + (b*G+i)*M + j, under its plan).

    >>> two_level_tree(1, 2, 2).tolist()
    [-1, 0, 0, 1, 1, 2, 2]
    """
    roots = torch.full((B,), -1)
    plans = torch.arange(B).repeat_interleave(G)  # [B*G] -> problem
    codes = B + torch.arange(B * G).repeat_interleave(M)  # [B*G*M] -> plan node
    return torch.cat([roots, plans, codes])


def node_credit(rewards: torch.Tensor, valid: torch.Tensor, parent: torch.Tensor, credit: str = "mean",
                temperature: float = 0.5, clean: torch.Tensor | None = None, scores: torch.Tensor | None = None):
    """Credit R of every node of a forest (the rollout tree; tree_advantages): a code (a leaf) keeps its own
    reward; a plan (an inner node) is worth the mean (or max) of its VALID codes, at any depth below it:
    R_plan = mean of the valid codes below it -- not the mean of its children's means (a Retriever whose
    plans have 2 and 1 valid codes is worth the mean of those 3 codes: the expected result of one code
    drawn below it).

    rewards [N] float (read at the leaves only; rewards >= 0 for 'max'), valid [N] bool (the node's
    own completion is non-empty), parent [N] long (-1 for a root: the problem, never trained).
    Returns (R [N], ok [N] bool: the node enters its sibling group: valid, and a leaf or with at
    least one valid leaf below). Raises ValueError for a credit other than mean / max / softmax.
    credit 'softmax' (the authors' release): softmax_credit, with temperature, clean and scores.
    """
    if credit == "softmax":
        return softmax_credit(rewards, valid, parent, temperature, clean, scores)
    # BEGIN SOLUTION planner_adv
    if credit not in ("mean", "max"):
        raise ValueError(f"unknown planner credit '{credit}': use mean, max or softmax")
    N = parent.numel()
    is_code = torch.ones(N, dtype=torch.bool)  # the leaves: nodes that are nobody's parent
    is_code[parent[parent >= 0]] = False
    total, count, best = torch.zeros(N), torch.zeros(N), torch.zeros(N)  # over the valid codes below each node
    code = torch.nonzero(is_code & valid).flatten()  # [K] the valid codes
    up = parent[code]  # [K] each one's ancestor, one level higher per pass (-1: above the root)
    while (up >= 0).any():  # one pass per level of the tree
        code, up = code[up >= 0], up[up >= 0]
        total.index_add_(0, up, rewards[code].float())
        count.index_add_(0, up, torch.ones(len(code)))
        best.scatter_reduce_(0, up, rewards[code].float(), "amax")
        up = parent[up]
    inner = total / count.clamp(min=1) if credit == "mean" else best  # R_plan
    ok = valid & (is_code | (count > 0))
    return torch.where(is_code, rewards, inner.to(rewards.dtype)), ok
    # END SOLUTION


PLAN_BONUS = 0.1  # the release's no-error bonus of a plan (examples/reward_function/higher-order.py)


def softmax_credit(rewards: torch.Tensor, valid: torch.Tensor, parent: torch.Tensor, temperature: float = 0.5,
                   clean: torch.Tensor | None = None, scores: torch.Tensor | None = None):
    """The authors' credit of a plan (AlbertZhaoCA/e1, examples/reward_function/higher-order.py, accuracy_reward
    'softmax' + no_error_bonus): over the VALID codes j below an inner node, with s_j their scores,

        R = sum_j softmax(s / T)_j * s_j  +  PLAN_BONUS * 1[no test of any of those codes errored or timed out]

    a mean that leans towards the best code (T -> inf: the mean; T -> 0: the max). Worked values (tests):
    s = [1, 0], T = 0.5: weights e^2 / (e^2 + 1) = 0.880797 and 0.119203, R = 0.880797; s = [0.5, 0.5]: R = 0.5.

    rewards [N] (what a leaf keeps as its own R), valid [N] bool, parent [N] long as in node_credit;
    scores [N] (default rewards): the s_j the inner nodes weigh -- the release weighs pass rates, so
    tree.advantages passes those even when a code's own reward is shaped; clean [N] bool (default None: no
    bonus): the code's tests all ran to a verdict (reward.no_error). A node with no valid code below gets 0.
    Returns (R [N], ok [N]) as node_credit.
    """
    s = (rewards if scores is None else scores).float()
    N = parent.numel()
    is_code = torch.ones(N, dtype=torch.bool)
    is_code[parent[parent >= 0]] = False
    num, den, count, dirty = torch.zeros(N), torch.zeros(N), torch.zeros(N), torch.zeros(N)
    code = torch.nonzero(is_code & valid).flatten()  # [K] the valid codes
    w = torch.exp((s - s.max()) / temperature)  # [N] unnormalised softmax weights (shifted: no overflow)
    up = parent[code]
    while (up >= 0).any():  # one pass per level, as node_credit
        code, up = code[up >= 0], up[up >= 0]
        num.index_add_(0, up, w[code] * s[code])  # sum_j e^{s_j/T} s_j
        den.index_add_(0, up, w[code])  # sum_j e^{s_j/T}
        count.index_add_(0, up, torch.ones(len(code)))
        if clean is not None:
            dirty.index_add_(0, up, (~clean[code]).float())
        up = parent[up]
    inner = num / den.clamp(min=torch.finfo(torch.float32).tiny)
    if clean is not None:
        inner = inner + PLAN_BONUS * ((dirty == 0) & (count > 0)).float()
    ok = valid & (is_code | (count > 0))
    return torch.where(is_code, rewards, inner.to(rewards.dtype)), ok


def sibling_advantages(credit: torch.Tensor, ok: torch.Tensor, group: torch.Tensor, scale: bool = True):
    """Each node's credit normalised among its sibling group: A = (R - mean of siblings) / (std + EPS)
    (`group_advantages` on each group: valid nodes only, population std, a group without spread exactly 0).

    credit [N] float, ok [N] bool (node_credit), group [N] long: the group's id, usually the
    node's parent (its siblings); -1: in no group (a root), A = 0. Groups may differ in size.
    Returns (A [N], zero_std [N] bool: the node's group carries no signal; True for -1).
    """
    # BEGIN SOLUTION coder_adv
    adv, zero = torch.zeros_like(credit), torch.ones(credit.shape, dtype=torch.bool)
    for g in torch.unique(group[group >= 0]).tolist():
        siblings = torch.nonzero(group == g).flatten()  # [K] the members of one sibling group
        adv[siblings], zero[siblings] = group_advantages(credit[siblings], ok[siblings], scale)
    return adv, zero
    # END SOLUTION


def tree_advantages(rewards: torch.Tensor, valid: torch.Tensor, parent: torch.Tensor, credit: str = "mean",
                    scale: bool = True, group: torch.Tensor | None = None, fixed: torch.Tensor | None = None,
                    temperature: float = 0.5, clean: torch.Tensor | None = None, scores: torch.Tensor | None = None):
    """THE credit rule, for every level of the rollout tree (module docstring, "Tree"):
    R = node_credit (leaf: its reward; inner node: mean|max of the valid leaves below it), then
    A = sibling_advantages (normalised among the nodes with the same parent, or the same `group`).

    rewards, valid, parent [N] as in node_credit; group [N] long (default: parent); fixed [N] bool
    (default none): inner nodes whose credit is rewards[i] whatever lies below (an unparseable
    retrieval: 0). Returns (R [N], A [N], zero_std [N]). Training calls it through tree.advantages;
    credit 'softmax' (the release's): temperature, clean, scores as softmax_credit.
    coder_advantages and planner_advantages are its two-level case (two_level_tree); the Debugger's groups
    (debugger_advantages) are a forest of depth 1 under each failing program.
    """
    R, ok = node_credit(rewards, valid, parent, credit, temperature, clean, scores)
    if fixed is not None:
        R = torch.where(fixed, rewards, R)
    adv, zero = sibling_advantages(R, ok, parent if group is None else group, scale)
    return R, adv, zero


def coder_advantages(rewards: torch.Tensor, valid: torch.Tensor, baseline: str = "plan", scale: bool = True):
    """Coder advantages [B, G, M] from rewards [B, G, M]: tree_advantages at the leaves of
    two_level_tree (a leaf's credit is its own reward, so only the grouping is left). Training gets the
    same numbers from tree.advantages (one call of tree_advantages for every role); this two-level form
    is for reading, the tests and the course.

    baseline 'plan' (default): group = the M codes written for the same plan (the code's parent),
    so a bad plan does not punish the Coder. 'problem': group = all G*M codes of the problem
    (the grandparent; plain GRPO).
    Returns (A [B, G, M], zero_std bool [B, G] or [B]). Raises ValueError for another baseline.
    """
    if baseline not in ("plan", "problem"):
        raise ValueError(f"unknown coder baseline '{baseline}': use plan or problem")
    B, G, M = rewards.shape
    tree = two_level_tree(B, G, M)
    codes = slice(B + B * G, None)
    # BEGIN SOLUTION coder_adv
    group = tree[codes] if baseline == "plan" else tree[tree[codes]]
    adv, zero = sibling_advantages(rewards.flatten(), valid.flatten(), group, scale)
    zero = zero.view(B, G, M)[..., 0] if baseline == "plan" else zero.view(B, G * M)[:, 0]
    # END SOLUTION
    return adv.view(B, G, M), zero


def planner_advantages(rewards: torch.Tensor, valid: torch.Tensor, plan_valid: torch.Tensor,
                       credit: str = "mean", scale: bool = True):
    """Planner advantages [B, G]: a plan is worth what the Coder achieves with it, R^P_i
    (tree_advantages at the middle level of two_level_tree). Training gets the same numbers from
    tree.advantages; this two-level form is for reading, the tests and the course.

    rewards, valid: [B, G, M]; plan_valid: [B, G] (the plan itself is non-empty).
    credit 'mean': R^P_i = mean of its valid codes' rewards (the expected result of following it);
    'max': R^P_i = best valid code (our choice to offer: a plan is worth its best execution, which
    still credits a good plan while the Coder is weak). A plan none of whose codes is valid is left
    out of its group. Returns (A [B, G], zero_std [B]). Raises ValueError for another credit.
    """
    B, G, M = rewards.shape
    r = torch.cat([torch.zeros(B + B * G, dtype=rewards.dtype), rewards.flatten()])
    ok = torch.cat([torch.zeros(B, dtype=torch.bool), plan_valid.flatten(), valid.flatten()])
    _, adv, zero = tree_advantages(r, ok, two_level_tree(B, G, M), credit, scale)
    plans = slice(B, B + B * G)
    return adv[plans].view(B, G), zero[plans].view(B, G)[:, 0]


def debugger_advantages(repaired: torch.Tensor, valid: torch.Tensor, original: torch.Tensor,
                        reward: str = "pass_rate", scale: bool = True):
    """The Debugger's rewards and advantages: the D repairs of ONE failing program form one group.

    repaired [K, D]: pass rate on ALL tests of each of the D repairs of K failing programs;
    valid [K, D] bool (a repair with no code is left out of its group); original [K]: the pass
    rate of the program each repaired. reward 'pass_rate': r = repaired; 'gain': r = repaired -
    original (can be < 0). Within a group the original is one constant, so both give the SAME
    advantages (A = r - mean r is shift-invariant, and so is the std); they differ in the reward
    that is logged, and a gain tells at a glance whether debugging helped (our choice to offer both).
    Returns (rewards [K, D], A [K, D], zero_std [K]). ValueError for another reward.
    """
    if reward not in ("pass_rate", "gain"):
        raise ValueError(f"unknown debug reward '{reward}': use pass_rate or gain")
    K, D = repaired.shape
    r = repaired - original[:, None] if reward == "gain" else repaired  # [K, D]
    parent = torch.cat([torch.full((K,), -1), torch.arange(K).repeat_interleave(D)])  # K roots, K*D repairs
    flat_r = torch.cat([torch.zeros(K, dtype=r.dtype), r.flatten()])
    flat_ok = torch.cat([torch.zeros(K, dtype=torch.bool), valid.flatten()])
    _, adv, zero = tree_advantages(flat_r, flat_ok, parent, "mean", scale)
    return r, adv[K:].view(K, D), zero[K:].view(K, D)[:, 0]


def loss_weights(mask: torch.Tensor, loss_type: str = "token", max_len: int | None = None) -> torch.Tensor:
    """Per-token weights w [N, T] of the loss, computed once over the WHOLE step's batch.

    token  : w = mask / (number of completion tokens)            (DAPO sec. 3.3)
    grpo   : w = mask / (len_i * N)  (mean over tokens, then over sequences; DeepSeekMath eq. 3)
    dr_grpo: w = mask / (N * max_len)  (constant normaliser; Dr. GRPO, Liu et al. 2025)
    Because the normaliser is global, splitting the batch into micro-batches and summing their
    losses gives exactly the full-batch loss. Masked-out (truncated/excluded) samples have
    mask = 0 and are not counted in any normaliser.
    """
    # BEGIN SOLUTION loss_weights
    mask = mask.float()
    lens = mask.sum(-1, keepdim=True)  # [N, 1]
    n_seq = (lens > 0).sum().clamp(min=1)
    if loss_type == "token":
        return mask / mask.sum().clamp(min=1)
    if loss_type == "grpo":
        return mask / lens.clamp(min=1) / n_seq
    if loss_type == "dr_grpo":
        return mask / (n_seq * (max_len or mask.shape[1]))
    raise ValueError(f"unknown loss_type '{loss_type}': use token, grpo or dr_grpo")
    # END SOLUTION


def grpo_loss(logp, old_logp, ref_logp, adv, weights, epsilon=0.2, epsilon_high=None, beta=0.0):
    """Clipped token-level GRPO loss with a k3 KL penalty (equations in the module docstring).

    logp: [N, T] log-probs under the policy (with grad); old_logp, ref_logp: [N, T] (no grad);
    adv: [N] one advantage per sequence; weights: [N, T] from `loss_weights` (0 off-mask).
    epsilon / epsilon_high: eps_low / eps_high of the clip (epsilon_high None: = epsilon; DAPO's
    clip-higher uses 0.28). Returns (loss scalar, metrics dict of floats: kl, clip_frac, ratio;
    token means over the mask). With one inner iteration old_logp == logp.detach(): rho = 1 and
    the gradient is REINFORCE's, dL/dlogp_t = -w_t A.
    Worked example (test_grpo.py checks it): 3 tokens, w = 1/3 each, beta = 0, eps = 0.2,
    eps_high = 0.28, rho = [0.5, 1.0, 1.5]:
        A = +1: min(rho, clip(rho)) = [min(0.5, 0.8), 1, min(1.5, 1.28)] = [0.5, 1, 1.28]
                L = -(0.5 + 1 + 1.28) / 3 = -0.926667
        A = -1: min(-rho, -clip(rho)) = [-0.8, -1, -1.5]       L = (0.8 + 1 + 1.5) / 3 = 1.1
    """
    # BEGIN SOLUTION surrogate
    eps_low, eps_high = epsilon, epsilon if epsilon_high is None else epsilon_high
    A = adv[:, None]  # [N, 1]
    ratio = torch.exp(logp - old_logp)  # [N, T]
    clipped = torch.clamp(ratio, 1 - eps_low, 1 + eps_high)
    surrogate = torch.minimum(ratio * A, clipped * A)  # [N, T]
    d = ref_logp - logp
    kl = torch.exp(d) - d - 1  # [N, T] k3 >= 0, = 0 when policy == reference
    loss = -((surrogate - beta * kl) * weights).sum()
    on = weights > 0
    n = on.sum().clamp(min=1)
    with torch.no_grad():
        metrics = {
            "kl": (kl * on).sum().item() / n.item(),
            "clip_frac": (((ratio < 1 - eps_low) | (ratio > 1 + eps_high)) & on).sum().item() / n.item(),
            "ratio": (ratio * on).sum().item() / n.item(),
        }
    # END SOLUTION
    return loss, metrics
