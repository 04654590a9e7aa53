"""Collaboration-aware GRPO: the math only, pure functions on tensors.

One problem x gives a tree of rollouts (shapes for B problems, G plans each, M codes per plan):

    x --Planner--> p_1..p_G --Coder--> c_i1..c_iM --sandbox--> r_ij in [0, 1]     r: [B, G, M]

Advantages (our reading of CoRe-Code's "collaboration-aware" credit, ../README.md "How the loss works"):
    Coder   A^C_ij = (r_ij - mean_j r_i.) / (std_j r_i. + eps)    baseline = codes of the SAME plan
    Planner R^P_i  = mean_j r_ij  (or max_j r_ij: --planner-credit max),
            A^P_i  = (R^P_i - mean_i R^P) / (std_i R^P + eps)
    --scale-rewards none drops the division by (std + eps) (Dr. GRPO, Liu et al. 2025, sec. 3.1).
Worked example (test_grpo.py checks it), one problem, G = 2 plans x M = 2 codes, r = [[1, 0], [0, 0]]:
    Coder, plan 1: mean 0.5, std 0.5 -> A^C_1. = +-0.5 / 0.5001 = +-0.99980; plan 2: all equal -> 0, 0
    Planner, mean credit: R^P = [0.5, 0], mean 0.25, std 0.25 -> A^P = +-0.25 / 0.2501 = +-0.99960
    Planner, max credit:  R^P = [1, 0],   mean 0.5,  std 0.5  -> A^P = +-0.99980
    Coder, --coder-baseline problem: one group [1, 0, 0, 0], mean 0.25, std 0.43301
                                     -> A = 0.75 / 0.43311 = 1.73165 and -0.25 / 0.43311 = -0.57722
Loss per role (DeepSeekMath, Shao et al. 2024, sec. 4.1; token-level sum and clip-higher: DAPO,
Yu et al. 2025, sec. 3.1/3.3; k3 KL estimator: Schulman 2020, "Approximating KL divergence"):
    rho_t = exp(logp_t - logp_old_t)
    KL_t  = exp(logp_ref_t - logp_t) - (logp_ref_t - logp_t) - 1
    L     = - sum_{seq,t} w_t [ min(rho_t A, clip(rho_t, 1 - eps_low, 1 + eps_high) A) - beta KL_t ]
with weights w from `loss_weights` (they sum to 1 over the whole step for 'token' and 'grpo').
Efficiency reward (issue 14; `efficiency_bonus`, --efficiency-weight lambda), for program j of problem b
that passes EVERY test, with t = its tests' CPU seconds (EffiBench's ET, efficiency.py):
    NET_bj = max(t_bj, floor) / max(t0_b, floor),  t0_b = the reference's t when the record has one,
                                                    else min t over the fully-passing programs of problem b
    r_bj  += lambda * min(1, 1 / NET_bj)            (0 for a program that fails a test)
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


def coder_advantages(rewards: torch.Tensor, valid: torch.Tensor, baseline: str = "plan", scale: bool = True):
    """Coder advantages [B, G, M] from rewards [B, G, M].

    baseline 'plan' (default): group = the M codes written for the same plan, so a bad plan
    does not punish the Coder. 'problem': group = all G*M codes of the problem (plain GRPO).
    Returns (A [B, G, M], zero_std bool [B, G] or [B]). Raises ValueError for another baseline.
    """
    # BEGIN SOLUTION coder_adv
    if baseline == "plan":
        return group_advantages(rewards, valid, scale)
    if baseline != "problem":
        raise ValueError(f"unknown coder baseline '{baseline}': use plan or problem")
    B, G, M = rewards.shape
    adv, zero = group_advantages(rewards.reshape(B, G * M), valid.reshape(B, G * M), scale)
    return adv.reshape(B, G, M), zero
    # END SOLUTION


def planner_advantages(rewards: torch.Tensor, valid: torch.Tensor, plan_valid: torch.Tensor,
                       credit: str = "mean", scale: bool = True):
    """Planner advantages [B, G]: a plan is worth what the Coder achieves with it, R^P_i.

    rewards, valid: [B, G, M]; plan_valid: [B, G] (the plan itself is non-empty).
    credit 'mean': R^P_i = mean of its valid codes' rewards (the expected result of following it);
    'max': R^P_i = best valid code (our choice to offer: a plan is worth its best execution, which
    still credits a good plan while the Coder is weak). A plan none of whose codes is valid is left
    out of its group. Returns (A [B, G], zero_std [B]). Raises ValueError for another credit.
    """
    # BEGIN SOLUTION planner_adv
    v = valid.float()
    if credit == "mean":
        plan_reward = (rewards * v).sum(-1) / v.sum(-1).clamp(min=1)  # [B, G]  R^P_i
    elif credit == "max":
        plan_reward = rewards.masked_fill(~valid, 0.0).amax(-1)  # [B, G] (rewards >= 0)
    else:
        raise ValueError(f"unknown planner credit '{credit}': use mean or max")
    ok = plan_valid & valid.any(-1)  # [B, G]
    return group_advantages(plan_reward, ok, scale)
    # END SOLUTION


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


def efficiency_bonus(times: torch.Tensor, passed: torch.Tensor, ref_times: torch.Tensor | None = None,
                     weight: float = 1.0, floor_s: float = 1e-3) -> torch.Tensor:
    """Reward bonus for fast correct code: lambda * min(1, 1 / NET) (equation in the module docstring).

    times: [B, ...] CPU seconds of each program's tests (ET; ignored where not passed), e.g. [B, G, M];
    passed: [B, ...] bool, True for a program that passed every test;
    ref_times: [B] the reference solution's ET on the same tests, NaN where the problem has none; None: no
    references. Without a reference the normaliser is the fastest fully-passing program of the SAME
    problem (all its G*M programs: the group). weight: lambda. floor_s: times below it count as equal
    (efficiency.ET_FLOOR_S: sub-millisecond CPU times are mostly timer noise), so noise earns nothing.
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
