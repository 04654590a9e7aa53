"""One role's GRPO update pass: the loss over micro-batches, its backward, and pi_old's log-probs.

train.grpo_step calls policy_update once per role after the rollouts are scored; the gradients of
all roles accumulate and one optimizer step follows. The math of each line is in grpo.py. Every
forward is rollout.shared_prompt_logprobs: the rows of a micro-batch that share a prompt (a group)
compute it once; its values and gradients are those of the row-by-row rollout.logprobs.
"""
import torch

import distributed
import grpo
import rollout


def policy_update(policy, role, r: rollout.Rollout, adv, valid, max_len, args, clock, old_logp=None):
    """Backward of one role's GRPO loss over micro-batches (gradients accumulate); returns (loss, metrics).

    r: the role's rollout, N rows; adv: [N]; valid: [N] bool; max_len: the role's token budget
    (the constant of 'dr_grpo'). The weights w are computed once for all N rows, so the summed
    micro-batch losses equal the full-batch loss whatever --micro-batch is
    (docs/algorithm.md#excluded-samples-still-count-in-the-normaliser).
    With beta = 0 a row with A = 0 has loss and gradient exactly 0: it gets no forward pass
    (it still counts in the normaliser); with beta > 0 its KL term is trained, so it runs.
    Raises FloatingPointError on a non-finite loss (the caller skips the optimizer step).
    """
    policy.set_adapter(role)
    adv, valid = adv.to(r.seqs.device), valid.to(r.seqs.device)  # rewards live on the CPU
    mask = r.mask * valid[:, None].float()  # [N, T]
    if args.mask_truncated:
        mask = mask * (~r.truncated)[:, None].float()
    w = grpo.loss_weights(mask, args.loss_type, max_len)  # [N, T], sums to 1 for 'token'
    w = w * distributed.normaliser_share(mask, args.loss_type)  # torchrun: over all ranks' rows
    rows = [i for i in range(len(adv)) if mask[i].sum() > 0 and (adv[i] != 0 or args.beta > 0)]
    total, stats = 0.0, []
    for k in range(0, len(rows), args.micro_batch):
        idx = torch.tensor(rows[k:k + args.micro_batch])
        ref = None  # pi_ref = the base model (adapters off); only needed for the KL term
        if args.beta > 0:
            with clock("reference_logprobs"), torch.no_grad(), policy.disable_adapter():
                ref = rollout.shared_prompt_logprobs(policy, r, idx)  # [n, T]
        with clock("policy_forward_backward"):
            logp = rollout.shared_prompt_logprobs(policy, r, idx)  # [n, T] with grad
            old = logp.detach() if old_logp is None else old_logp[idx]
            loss, m = grpo.grpo_loss(logp, old, logp.detach() if ref is None else ref, adv[idx], w[idx],
                                     args.epsilon, args.epsilon_high, args.beta)
            if not torch.isfinite(loss):
                raise FloatingPointError(f"non-finite {role} loss")
            loss.backward()
        total += loss.item()
        stats.append((len(idx), m))
    n = sum(c for c, _ in stats) or 1
    metrics = {k: sum(c * m[k] for c, m in stats) / n if stats else None for k in ("kl", "clip_frac")}
    if args.beta == 0:
        metrics["kl"] = None  # not computed: no reference pass when beta = 0
    return total, metrics


def all_logprobs(policy, r: rollout.Rollout, micro_batch: int) -> torch.Tensor:
    """[N, T] log-probs of every row of r under the active adapter, without grad."""
    with torch.no_grad():
        return torch.cat([rollout.shared_prompt_logprobs(policy, r, slice(i, i + micro_batch))
                          for i in range(0, r.seqs.shape[0], micro_batch)])
