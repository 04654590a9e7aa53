"""One role's GRPO update pass: the loss over micro-batches, its backward, and pi_old's log-probs.

train.grpo_step calls policy_update once per role after the rollouts are scored; the gradients of
all roles accumulate and one optimizer step follows. The math of each line is in grpo.py. Every
forward shares prompts: the rows that share a prompt (a group) forward it once (rollout.prompt_pass),
and the values and gradients are those of the row-by-row rollout.logprobs. A prompt is
forwarded once per role update, however many micro-batches its rows fill: its pass is kept
(rollout.prompt_pass, detached), each micro-batch's backward leaves its gradient on the prompt's keys and
values, and one backward through the prompt pass follows its last micro-batch.
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
    shared = not rollout.checkpointing(policy)  # else row by row (rollout.logprobs), as the layers drop the cache

    def forward(idx, pp):  # [n, T] log-probs of rows idx
        return rollout.completion_logprobs(policy, r, idx, pp) if shared else rollout.logprobs(policy, r, idx)

    for chunk in prompt_chunks(rows, r.n, args.micro_batch):
        prompts = torch.unique(torch.tensor(chunk) // r.n)  # [u] the chunk's prompts, u <= --micro-batch
        pp = ref_pp = None
        if shared and args.beta > 0:  # pi_ref = the base model (adapters off); only needed for the KL term
            with clock("reference_logprobs"), torch.no_grad(), policy.disable_adapter():
                ref_pp = rollout.prompt_pass(policy, r, prompts)
        if shared:
            with clock("policy_forward_backward"):
                pp = rollout.prompt_pass(policy, r, prompts, detach=True)
        for k in range(0, len(chunk), args.micro_batch):
            idx = torch.tensor(chunk[k:k + args.micro_batch])
            ref = None
            if args.beta > 0:
                with clock("reference_logprobs"), torch.no_grad(), policy.disable_adapter():
                    ref = forward(idx, ref_pp)  # [n, T]
            with clock("policy_forward_backward"):
                logp = forward(idx, pp)  # [n, T] with grad
                old = logp.detach() if old_logp is None else old_logp[idx]
                loss, m = grpo.grpo_loss(logp, old, logp.detach() if ref is None else ref, adv[idx], w[idx],
                                         args.epsilon, args.epsilon_high, args.beta)
                if not torch.isfinite(loss):
                    raise FloatingPointError(f"non-finite {role} loss")
                loss.backward()  # the completions' part; the prompt's gradient waits on pp's leaves
            total += loss.item()
            stats.append((len(idx), m))
        if shared:
            with clock("policy_forward_backward"):
                pp.backward()  # the prompt pass once, with the sum of its micro-batches' gradients
    n = sum(c for c, _ in stats) or 1
    metrics = {k: sum(c * m[k] for c, m in stats) / n if stats else None for k in ("kl", "clip_frac")}
    if args.beta == 0:
        metrics["kl"] = None  # not computed: no reference pass when beta = 0
    return total, metrics


def prompt_chunks(rows: list, n: int, per_chunk: int) -> list:
    """rows (ascending row ids; row i belongs to prompt i // n) -> lists of rows, each holding all the rows
    of at most `per_chunk` prompts, in order. E.g. rows [0, 1, 2, 5, 6, 9], n = 4, per_chunk 1 ->
    [[0, 1, 2], [5, 6], [9]]; per_chunk 2 -> [[0, 1, 2, 5, 6], [9]]."""
    groups = {}
    for i in rows:
        groups.setdefault(i // n, []).append(i)
    prompts = list(groups.values())
    return [sum(prompts[k:k + per_chunk], []) for k in range(0, len(prompts), per_chunk)]


def all_logprobs(policy, r: rollout.Rollout, micro_batch: int) -> torch.Tensor:
    """[N, T] log-probs of every row of r under the active adapter, without grad (each prompt forwarded once)."""
    out = []
    with torch.no_grad():
        for chunk in prompt_chunks(list(range(r.seqs.shape[0])), r.n, micro_batch):
            pp = rollout.prompt_pass(policy, r, torch.unique(torch.tensor(chunk) // r.n))
            out += [rollout.completion_logprobs(policy, r, torch.tensor(chunk[k:k + micro_batch]), pp)
                    for k in range(0, len(chunk), micro_batch)]
    return torch.cat(out)
