"""Cold-start SFT (the paper's first stage): teach each role its format before GRPO.

The loss is the token-level cross-entropy of the reference completion, written with the same
pieces as GRPO: a teacher-forced Rollout (rollout.from_texts), its per-token log-probs, and the
'token' weights of grpo.loss_weights (1 / number of target tokens).
"""
import json
import random

import torch
from tqdm import tqdm

import coder
import grpo
import planner
import rollout


def train(policy, tok, problems, role, args, optimizer, log=None):
    """--sft-steps steps of cold-start SFT of one role; each step's loss goes to `log` (JSONL).

    Planner: problem -> reference plan. Coder: problem + reference plan -> reference solution
    (single agent, --roles coder: problem -> solution). Batches of --sft-batch problems drawn
    at random from those with a plan and a solution; lr --sft-lr, then set back to --lr.
    Loss: mean over target tokens of -log pi(token) (the target's EOS included).
    """
    policy.set_adapter(role)
    for g in optimizer.param_groups:
        g["lr"] = args.sft_lr
    pool = [p for p in problems if p.plan and p.solution]
    with_plan = "planner" in args.roles
    for i in tqdm(range(args.sft_steps), desc=f"sft {role}", dynamic_ncols=True):
        batch = random.sample(pool, min(args.sft_batch, len(pool)))
        chats = [planner.messages(p) if role == "planner" else coder.messages(p, p.plan if with_plan else None)
                 for p in batch]
        targets = [planner.sft_target(p) if role == "planner" else coder.sft_target(p) for p in batch]
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
