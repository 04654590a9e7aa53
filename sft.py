"""Cold-start SFT (the paper's first stage): teach each role its format before GRPO.

The loss is the token-level cross-entropy of the reference completion, written with the same
pieces as GRPO: teacher-forced Rollouts (rollout.from_texts), their per-token log-probs, and the
'token' weights of grpo.loss_weights (1 / number of target tokens of the whole step):

    loss = -(1 / n_tokens) * sum over the step's target tokens of log pi(token)

computed over micro-batches of --micro-batch pairs (gradient accumulation, as the GRPO update), so
memory is that of one micro-batch and the gradient is the full batch's.
"""
import json
import random
import time

import torch
from tqdm import tqdm

import roles
import rollout
import update
from fast import cpu_linear
from infra import progress


def pairs(problems, role: str, chain, coder_prompts: str = "chain") -> list[tuple[list, str]]:
    """The (chat, target) pairs of one role's SFT, from the problems with a reference plan and solution.

    The prompt is the role's own (roles.ROLES[role].messages) with the upstream its SFT wants: the
    reference plan for the Coder of a chain with a Planner (none for --roles coder, the single agent),
    nothing for the Planner (no examples), and for the Debugger debugger.sft_upstream: a mutant of the
    reference that fails its visible test, with that feedback (sandbox runs; problems without one are left out).
    coder_prompts (--sft-coder-prompts): "chain" as just said; "both": the Coder gets each problem twice, with
    the reference plan and without any (so one SFT starts a planned chain and the single agent alike: our choice).
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
            if role == "coder" and coder_prompts == "both" and up.get("plan") is not None:
                out.append((r.messages(p, {"plan": None}), target))  # the same target, asked directly
    return out


MAX_POSITIONS = 512  # tokens (pairs x longest pair) in one SFT micro-batch: our choice, see micro_batches


def micro_batches(tok, chats: list, targets: list, size: int, device, max_positions: int | None = MAX_POSITIONS) -> list:
    """The step's pairs as teacher-forced Rollouts (rollout.from_texts), the pairs sorted by length first so
    that each micro-batch is padded only to its own longest prompt and target; a micro-batch holds at most
    `size` pairs and, past its first pair, at most `max_positions` tokens (pairs x its longest pair).

    Memory is that of one micro-batch: what its forward saves for the backward (30 layers' inputs, the
    attention's [heads, T, T], the logits [pairs, T, V] of the target positions: rollout.logprobs), about
    3.3 MiB per position on SmolLM2-135M in float32, measured. A count of pairs alone let long pairs share a
    micro-batch: one step on the 8 longest Coder pairs (370-516 tokens) peaked at 3.71 GiB, the model
    included, and 2.13 GiB with 512 positions (our choice: a laptop's 3 GiB for the whole run). The pairs
    are the same, so the summed micro-batch losses are the full batch's loss (train: one token-mean
    normaliser for the whole step).
    """
    prompts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    lengths = [len(x) for x in tok([p + t for p, t in zip(prompts, targets)], add_special_tokens=False).input_ids]
    groups = []
    for i in sorted(range(len(chats)), key=lengths.__getitem__):  # ascending: pair i is its group's longest
        g = groups[-1] if groups else None
        if g is None or len(g) == size or (max_positions and (len(g) + 1) * lengths[i] > max_positions):
            groups.append([i])
        else:
            g.append(i)
    return [rollout.from_texts(tok, [chats[i] for i in g], [targets[i] for i in g], device) for g in groups]


def train(policy, tok, problems, role, args, optimizer, log=None, start: int = 0, stop=None) -> int:
    """--sft-steps steps of cold-start SFT of one role; each step's loss goes to `log` (JSONL). Returns the
    steps of the role done so far: --sft-steps, or fewer when `stop()` (asked after each step: a Ctrl-C,
    interrupt.Stop) said to stop there; `start`: the steps a checkpoint had done (a resume goes on after them).

    Planner: problem -> reference plan. Coder: problem + reference plan -> reference solution
    (single agent, --roles coder: problem -> solution). Debugger: problem + plan + a failing mutant and
    its visible feedback -> the reference (debugger.sft_target). Batches of --sft-batch pairs (`pairs`)
    drawn at random; lr --sft-lr, then set back to each group's GRPO rate (--lr; the Planner's --planner-lr).
    Loss: mean over target tokens of -log pi(token) (the target's EOS included), over micro-batches of
    --micro-batch pairs (micro_batches). Each step's line: loss, tokens (prompt + target tokens of its
    pairs), positions (what was forwarded, padding included), products (float32, or bfloat16: the frozen base's
    products under --sft-products, cpu_linear.bf16_products), time_step_s. At the end freed memory goes
    back to the system (cpu_linear.release_memory), so the next stage starts from the model's footprint.
    The steps run in train mode (dropout and gradient checkpointing live), the mode at entry restored at the end.
    Raises ValueError (one line) when the role has no pair in `problems`.
    """
    pool = pairs(problems, role, args.roles, getattr(args, "sft_coder_prompts", "chain"))
    if not pool:
        raise ValueError(f"no SFT pair for the {role} in the training problems (they need a plan and a solution)")
    policy.set_adapter(role)
    device = next(policy.parameters()).device
    for g in optimizer.param_groups:
        g["lr"] = args.sft_lr
    bf16, start_at = cpu_linear.use_bf16(getattr(args, "sft_products", "float32")), start  # --sft-products
    was_training = policy.training  # from_pretrained leaves the model in eval mode: no dropout, and
    policy.train()  # gradient checkpointing (HF's, in train mode only) would recompute nothing; put back below
    with cpu_linear.bf16_products(policy, on=bf16):  # the frozen base's products in bf16, or as they are
        for i in progress.bar(range(start, args.sft_steps), f"sft {role}", total=args.sft_steps, initial=start):
            if stop is not None and i > start_at and stop():  # a safe point, i steps done: the caller saves here
                break
            t = time.perf_counter()
            chats, targets = map(list, zip(*random.sample(pool, min(args.sft_batch, len(pool)))))
            parts = micro_batches(tok, chats, targets, args.micro_batch, device)  # Rollouts of <= --micro-batch pairs
            # BEGIN SOLUTION sft_step
            n_tokens = sum(r.mask.sum() for r in parts)  # the step's target tokens: one normaliser for all parts
            optimizer.zero_grad(set_to_none=True)
            loss = 0.0
            for r in parts:  # gradients add up over the parts: the full batch's gradient
                part = -(rollout.logprobs(policy, r) * r.mask).sum() / n_tokens
                part.backward()
                loss += part.item()
            torch.nn.utils.clip_grad_norm_(update.params(optimizer), args.max_grad_norm)
            optimizer.step()
            # END SOLUTION
            if log:
                log.write(json.dumps({"phase": "sft", "role": role, "sft_step": i + 1, "loss": loss, **step_tokens(parts),
                                      "products": "bfloat16" if bf16 else "float32",
                                      "time_step_s": time.perf_counter() - t,
                                      "peak_rss_gib": progress.peak_rss_gib()}) + "\n")
            start = i + 1
    for g in optimizer.param_groups:  # AdamW moments carry over into GRPO: same weights, same scale
        g["lr"] = g.get("grpo_lr", args.lr)  # train.param_groups: a group's own GRPO rate (--planner-lr)
    policy.train(was_training)
    cpu_linear.release_memory()
    return start


def step_tokens(parts: list) -> dict:
    """tokens: the prompt and target tokens of a step's micro-batches (EOS of each target included);
    positions: the token positions forwarded, padding included."""
    real = sum(int(r.attn[:, :r.prompt_len].sum() + r.mask.sum()) for r in parts)
    return {"tokens": real, "positions": sum(r.seqs.numel() for r in parts)}
