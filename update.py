"""Step 4 of a GRPO step, the gradient step: each role's loss over micro-batches and its backward, then one
optimizer step on every adapter (train.grpo_step calls gradient_step after the rollouts are scored).

    for each role:                      role_backward
        for each micro-batch of rows:
            logp = logprobs(policy, rows)                        [n, T]
            loss = grpo_loss(logp, old, ref, A, w)               (grpo.py: the equations)
            loss.backward()                                      (gradients of all roles add up)
    clip the gradient norm; AdamW step                  (skipped when anything is non-finite)

The forward is the plain one (chunked.RowByRow: rollout.logprobs, the LM head in pieces) with
--no-shared-prompt or under gradient checkpointing, else shared_prompt.SharedPrompt, which forwards each
group's prompt once and gives the same values and gradients (the fast path; a reader can skip it).
"""
import math

import torch

import grpo
import roles
import rollout
from fast import chunked, shared_prompt
from infra import distributed


def params(optimizer) -> list:
    """Every weight the optimizer steps, over all its parameter groups (train.param_groups: --planner-lr puts
    the Planner's adapter in a group of its own)."""
    return [p for g in optimizer.param_groups for p in g["params"]]


def gradient_step(policy, rollouts, credit, args, optimizer, clock) -> tuple[dict, float, float, int]:
    """Step 4: the backward of every role's GRPO loss (update.role_backward; the gradients of all roles
    add up), then one AdamW step on all adapters after clipping the gradient norm to --max-grad-norm;
    --num-iterations times over the same rollouts, with pi_old's log-probs scored once before the first.

    A non-finite loss or gradient norm skips that optimizer step: nothing non-finite may reach the
    optimizer (docs/algorithm.md#non-finite-values-reach-the-optimizer). Every role still runs, so that
    under torchrun every rank reaches the same collectives (a role with no rows on a rank joins them too).
    Returns (per-role metrics {<role>_kl, <role>_clip_frac}, loss of the last iteration, gradient norm,
    skipped optimizer steps): plain numbers.
    """
    active = [role for role in args.roles if role in credit]  # a debugger with no failing program: no rows
    work = {role: (rollouts.outputs[role][0], credit[role].adv, credit[role].valid, roles.max_tokens(args, role))
            for role in active}
    olds, device = {}, next(policy.parameters()).device
    if args.num_iterations > 1:  # pi_old: the policy that sampled, scored before any update
        with clock("old_logprobs"):
            for role in active:
                policy.set_adapter(role)
                olds[role] = all_logprobs(policy, work[role][0], args)
    per_role, grad_norm, skipped, loss = {}, 0.0, 0, 0.0
    for _ in range(args.num_iterations):
        optimizer.zero_grad(set_to_none=True)
        loss, bad = 0.0, False
        try:
            for role in args.roles:
                if role not in work:  # no rows of this role on this rank (a Debugger with no failing program
                    # here): it still joins the role's normaliser all-reduce, which the other ranks run
                    distributed.normaliser_share(torch.zeros(0, 1, device=device), args.loss_type)
                    continue
                r, adv, valid, max_len = work[role]
                try:
                    l, m = role_backward(policy, role, r, adv, valid, max_len, args, clock, olds.get(role))
                except FloatingPointError:
                    bad = True  # the other roles still run: every rank must reach the same collectives
                    continue
                loss += l
                per_role.update({f"{role}_{k}": v for k, v in m.items()})
            with clock("optimizer"):
                trained = params(optimizer)
                if distributed.reduce_grads(trained, bad):  # torchrun: sum
                    raise FloatingPointError("non-finite loss")
                with_grad = [p for p in trained if p.grad is not None]
                if with_grad:
                    grad_norm = torch.nn.utils.clip_grad_norm_(with_grad, args.max_grad_norm).item()
                    if not math.isfinite(grad_norm):
                        raise FloatingPointError("non-finite gradient norm")
                    optimizer.step()
        except FloatingPointError:
            optimizer.zero_grad(set_to_none=True)
            skipped += 1
    return per_role, loss, grad_norm, skipped


def role_backward(policy, role, r: rollout.Rollout, adv, valid, max_len, args, clock, old_logp=None):
    """Backward of one role's GRPO loss over micro-batches (gradients accumulate); returns (loss, metrics).

    r: the role's rollout, N rows; adv: [N]; valid: [N] bool (an empty completion: out of the loss and of
    its normaliser); max_len: the role's token budget (the constant of 'dr_grpo'). The weights w are
    computed once for all N rows, so the summed micro-batch losses equal the full-batch loss whatever
    --micro-batch is (docs/algorithm.md#excluded-samples-still-count-in-the-normaliser).
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
    forward = scorer(policy, r, args, clock)
    total, stats = 0.0, []
    for idx in forward.micro_batches(rows):  # [n] row ids
        ref = None
        if args.beta > 0:  # pi_ref = the base model (adapters off); only needed for the KL term
            with clock("reference_logprobs"), torch.no_grad(), policy.disable_adapter():
                ref = forward.logprobs(idx, reference=True)  # [n, T]
        with clock("policy_forward_backward"):
            logp = forward.logprobs(idx)  # [n, T] with grad
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


def scorer(policy, r: rollout.Rollout, args, clock=None):
    """THE switch of the loss pass's forward: shared_prompt.SharedPrompt (each group's prompt forwarded once;
    --shared-prompt, the default) or chunked.RowByRow (--no-shared-prompt, and always under gradient checkpointing,
    which drops the cache the shared pass needs). Both give the same values and gradients."""
    if args.shared_prompt and shared_prompt.usable(policy):
        return shared_prompt.SharedPrompt(policy, r, args.micro_batch, clock, args.prompts_per_chunk,
                                          args.logprob_chunk)
    return chunked.RowByRow(policy, r, args.micro_batch, args.logprob_chunk)


def all_logprobs(policy, r: rollout.Rollout, args) -> torch.Tensor:
    """pi_old: [N, T] log-probs of every row of r under the active adapter, without grad (--num-iterations > 1)."""
    forward = scorer(policy, r, args)
    with torch.no_grad():
        return torch.cat([forward.logprobs(idx) for idx in forward.micro_batches(range(r.seqs.shape[0]))])
