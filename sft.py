"""Cold-start SFT (the paper's first stage): teach each role its format before GRPO.

The loss is the token-level cross-entropy of the reference completion, written with the same
pieces as GRPO: a teacher-forced Rollout (rollout.from_texts), its per-token log-probs, and the
'token' weights of grpo.loss_weights (1 / number of target tokens).
"""
import json
import random

import torch
from tqdm import tqdm

import grpo
import roles
import rollout


def pairs(problems, role: str, chain) -> list[tuple[list, str]]:
    """The (chat, target) pairs of one role's SFT, from the problems with a reference plan and solution.

    The prompt is the role's own (roles.ROLES[role].messages) with the upstream its SFT wants: the
    reference plan for the Coder of a chain with a Planner (none for --roles coder, the single agent),
    nothing for the Planner (no examples), and for the Debugger debugger.sft_upstream: a mutant of the
    reference that fails its visible test, with that feedback (sandbox runs; problems without one are left out).
    """
    r = roles.ROLES[role]
    out = []
    slow = r.sft_upstream is not None  # sandbox runs (the Debugger: ~0.1 s a problem): show progress
    for p in tqdm(problems if r.sft_target else [], desc=f"sft {role}: pairs", disable=not slow, dynamic_ncols=True):
        if not (p.plan and p.solution):
            continue
        up = r.sft_upstream(p) if r.sft_upstream else {"plan": p.plan if "planner" in chain else None}
        target = r.sft_target(p) if up is not None else None
        if target is not None:
            out.append((r.messages(p, up), target))
    return out


def train(policy, tok, problems, role, args, optimizer, log=None):
    """--sft-steps steps of cold-start SFT of one role; each step's loss goes to `log` (JSONL).

    Planner: problem -> reference plan. Coder: problem + reference plan -> reference solution
    (single agent, --roles coder: problem -> solution). Debugger: problem + plan + a failing mutant and
    its visible feedback -> the reference (debugger.sft_target). Batches of --sft-batch pairs (`pairs`)
    drawn at random; lr --sft-lr, then set back to --lr.
    Loss: mean over target tokens of -log pi(token) (the target's EOS included).
    Raises ValueError (one line) when the role has no pair in `problems`.
    """
    pool = pairs(problems, role, args.roles)
    if not pool:
        raise ValueError(f"no SFT pair for the {role} in the training problems (they need a plan and a solution)")
    policy.set_adapter(role)
    for g in optimizer.param_groups:
        g["lr"] = args.sft_lr
    for i in tqdm(range(args.sft_steps), desc=f"sft {role}", dynamic_ncols=True):
        chats, targets = map(list, zip(*random.sample(pool, min(args.sft_batch, len(pool)))))
        # BEGIN SOLUTION sft_step
        r = rollout.from_texts(tok, chats, targets, next(policy.parameters()).device)
        loss = -(rollout.logprobs(policy, r) * grpo.loss_weights(r.mask, "token")).sum()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(optimizer.param_groups[0]["params"], args.max_grad_norm)
        optimizer.step()
        # END SOLUTION
        if log:
            log.write(json.dumps({"phase": "sft", "role": role, "sft_step": i + 1, "loss": loss.item()}) + "\n")
    for g in optimizer.param_groups:  # AdamW moments carry over into GRPO: same weights, same scale
        g["lr"] = args.lr
