"""Rollouts: sample completions from the policy and score them with per-token log-probs.

A `Rollout` is what travels from sampling to the loss (the tiny-grpo idea: one small dataclass).
Layout of every row, prompts LEFT-padded to a common width P, completions RIGHT-padded:

    seqs  [N, L]   pad pad p p p p | c c c EOS pad pad       (L = P + T)
    attn  [N, L]   0   0   1 1 1 1 | 1 1 1 1   1   1         (after the prompt: all ones)
    mask  [N, T]                   | 1 1 1 1   0   0         (completion up to its first EOS)

Rows are prompt-major: with n samples per prompt, row i*n + k is sample k of prompt i, so rows
i*n .. i*n + n-1 share their prompt (`Rollout.n`): the sampler prefills it once (decode.py: the token loop
and its KV cache) and the loss pass can forward it once (fast/shared_prompt.py, the fast path of `logprobs`).
"""
import re
from dataclasses import dataclass

import torch

import decode
from fast import cpu_linear, fixed_decode
from grpo import completion_mask, token_logprobs
from infra import models


@dataclass
class Rollout:
    # all tensors on the model's device
    seqs: torch.Tensor  # [N, L] token ids
    attn: torch.Tensor  # [N, L] 0/1 attention mask
    prompt_len: int  # P
    mask: torch.Tensor  # [N, T] float 0/1, completion tokens (positions, never pad ids)
    truncated: torch.Tensor  # [N] bool, no EOS within the token budget
    texts: list  # N decoded completions (special tokens removed)
    n: int = 1  # rows per prompt: rows i*n .. i*n + n-1 share prompt i
    logp: torch.Tensor | None = None  # [N, T] the sampler's log-probs of its tokens (0 outside the mask); None: not sampled

    @property
    def valid(self) -> torch.Tensor:
        """[N] bool on the CPU, with the rewards: a non-empty completion (empty ones must not
        shift their group baseline)."""
        return torch.tensor([bool(t.strip()) for t in self.texts])


def prompt_texts(tok, chats: list) -> list[str]:
    """Chat messages -> prompt strings (the chat template adds specials). A chat whose last message is the
    assistant's is a reply begun (StepCoder's prefix): the prompt ends with that text, and the completion
    continues it."""
    return [tok.apply_chat_template(c[:-1], tokenize=False, add_generation_prompt=True) + c[-1]["content"]
            if c[-1]["role"] == "assistant" else tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
            for c in chats]


def encode_prompts(tok, chats: list, device) -> dict:
    """Chat messages -> left-padded input_ids/attention_mask [B, P] (prompt_texts)."""
    return tok(prompt_texts(tok, chats), return_tensors="pt", padding=True, add_special_tokens=False).to(device)


def heads(tok, chats: list) -> list[str] | None:
    """What the plain format (a base model: models.PLAIN_TEMPLATE) began each reply with in its prompt: the
    template's text after the last assistant header (the Coder's opening fence, or ""; a StepCoder prefix is
    not part of it); None for any other template. The stop pattern and the returned text see
    head + completion, so a begun reply reads whole."""
    if tok.chat_template != models.PLAIN_TEMPLATE:
        return None
    return [tok.apply_chat_template(c[:-1] if c[-1]["role"] == "assistant" else c, tokenize=False,
                                    add_generation_prompt=True).rpartition(models.ASSISTANT_HEADER)[2] for c in chats]


def end_ids(tok, policy) -> list[int]:
    """Every token id that ends a completion: the tokenizer's EOS first (it pads), then each other EOS of the
    model's generation config (Qwen2.5's <|endoftext|> beside <|im_end|>; one id for SmolLM2 and Gemma's base)."""
    extra = getattr(getattr(policy, "generation_config", None), "eos_token_id", None)
    extra = [] if extra is None else [extra] if isinstance(extra, int) else list(extra)
    return list(dict.fromkeys([tok.eos_token_id] + extra))


def _finish(tok, seqs, prompt_attn, P, stop: str | None = None, n: int = 1, head: list | None = None,
            ends: list | None = None) -> Rollout:
    if ends is not None and len(ends) > 1:  # another EOS of the generation config ends the row too (the tokens
        # stay as sampled: only the mask reads them as EOS)
        ended = torch.where(torch.isin(seqs, torch.tensor(ends, device=seqs.device)), tok.eos_token_id, seqs)
        ended[:, :P] = seqs[:, :P]
    else:
        ended = seqs
    mask, truncated = completion_mask(ended, P, tok.eos_token_id)  # [N, T], [N]
    attn = torch.cat([prompt_attn, torch.ones_like(seqs[:, P:])], dim=1)  # [N, L]
    texts = tok.batch_decode(seqs[:, P:] * mask.long() + tok.eos_token_id * (1 - mask.long()),
                             skip_special_tokens=True)
    if head:  # the plain format began the reply in the prompt: the text is the whole reply
        texts = [head[i // n] + t for i, t in enumerate(texts)]
    if stop:  # a row that stopped on the pattern ends there; the EOS padding after it was never
        # sampled, so it stays out of the loss (and the row is not truncated)
        stopped = torch.tensor([bool(re.search(stop, t, re.S)) for t in texts], device=seqs.device)
        before_eos = mask.sum(1) - (~truncated).float()  # [N] tokens before the first EOS
        pos = torch.arange(mask.shape[1], device=seqs.device)  # [T]
        mask = torch.where(stopped[:, None], (pos[None, :] < before_eos[:, None]).float(), mask)
        truncated = truncated & ~stopped
    return Rollout(seqs, attn, P, mask, truncated, texts, n)


def stop_on_pattern(tok, pattern: str, head: list | None = None, n: int = 1):
    """decode.decode's `stopped`: a row ends once its completion text (after head[prompt], what the plain format
    began it with) matches `pattern` (e.g. a closed ``` block). The sampler pads it with EOS after that; `_finish`
    ends its mask at the pattern, so only tokens the policy really sampled enter the loss, and the row is not
    truncated."""
    regex = re.compile(pattern, re.S)

    def stopped(rows, tokens):  # rows [A] (of the N), tokens [A, t]
        texts = tok.batch_decode(tokens, skip_special_tokens=True)
        if head:
            texts = [head[int(r) // n] + t for r, t in zip(rows, texts)]
        return torch.tensor([bool(regex.search(t)) for t in texts])
    return stopped


@torch.no_grad()
def sample(policy, tok, chats: list, n: int, max_new_tokens: int, temperature: float = 1.0,
           top_p: float = 1.0, stop: str | None = None, min_new_tokens: int = 0) -> Rollout:
    """n completions for each chat (N = len(chats) * n rows). temperature 0 means greedy.

    stop: a regex; a row ends once its completion matches it. min_new_tokens: EOS is forbidden
    before that many tokens (benchmarks force equal lengths with it). decode.decode does the work on a CPU, and
    fixed_decode.decode_fixed (the same tokens, fixed shapes: finished rows stay, masked) on CUDA: each
    chat's prompt prefilled once, finished rows dropped (CPU), the KV cache on also when gradient
    checkpointing is enabled. Runs in eval mode (restored after); the active LoRA adapter is whatever
    the caller set (on a CPU in float32 merged into the weights for the rollout: cpu_linear.sampling_weights).
    The Rollout's logp holds the sampler's log-probs (decode.py: the policy at
    temperature 1, as `logprobs` scores the same tokens).
    """
    device = next(policy.parameters()).device
    head = heads(tok, chats)  # None, or the plain format's begun replies (a base model)
    if head is not None:  # a base model's reply also ends where it starts the next turn
        stop = f"(?:{stop})|{models.TURN_END}" if stop else models.TURN_END
    enc = encode_prompts(tok, chats, device)
    P = enc.input_ids.shape[1]
    ends = end_ids(tok, policy)  # [tokenizer's EOS, the generation config's others]
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad(), cpu_linear.sampling_weights(policy, len(chats) * n):  # CPU: LoRA merged, packed
            # a CPU drops finished rows (decode.py: less compute); a GPU keeps fixed shapes (fast/fixed_decode.py:
            # no host waits)
            fixed = device.type == "cuda" and fixed_decode.supported(policy)
            sampler = fixed_decode.decode_fixed if fixed else decode.decode
            comp, logp = sampler(policy, enc.input_ids, enc.attention_mask, n, max_new_tokens, ends,
                                 temperature, top_p, min_new_tokens, stop_on_pattern(tok, stop, head, n) if stop else None)
    finally:
        policy.train(was_training)
    # comp: [N, T], EOS after each row's end (not the tokenizer's pad, which differs for Qwen): a stopped
    # row ends in one EOS, so completion_mask sees where it ended.
    if comp.shape[1] == 0:  # nothing generated at all: keep one EOS column so T >= 1
        comp, logp = torch.full_like(comp[:, :1], tok.eos_token_id), torch.zeros(comp.shape[0], 1, device=device)
    seqs = torch.cat([enc.input_ids.repeat_interleave(n, dim=0), comp], dim=1)  # [N, P + T]
    r = _finish(tok, seqs, enc.attention_mask.repeat_interleave(n, dim=0), P, stop, n, head, ends)
    r.logp = logp * r.mask
    if head is not None:  # the turn header it began is not part of the reply (its tokens were sampled: they stay in the loss)
        r.texts = [re.split(models.TURN_END, t, maxsplit=1)[0] for t in r.texts]
    return r


def from_texts(tok, chats: list, completions: list, device="cpu") -> Rollout:
    """Teacher-forced rollout (cold-start SFT): each completion + EOS after its chat prompt (in the plain format,
    the part of the completion the prompt already began, heads, is not repeated)."""
    enc = encode_prompts(tok, chats, device)
    P = enc.input_ids.shape[1]
    head = heads(tok, chats) or [""] * len(chats)
    completions = [c[len(h):] if h and c.startswith(h) else c for c, h in zip(completions, head)]
    ids = [tok(c, add_special_tokens=False).input_ids + [tok.eos_token_id] for c in completions]
    T = max(len(x) for x in ids)
    comp = torch.tensor([x + [tok.eos_token_id] * (T - len(x)) for x in ids], device=device)
    return _finish(tok, torch.cat([enc.input_ids, comp], dim=1), enc.attention_mask, P)


def logprobs(policy, r: Rollout, rows=slice(None)) -> torch.Tensor:
    """Per-token log-probs [n, T] of the completion tokens of r.seqs[rows] under `policy`.

    Only the last T + 1 positions' logits are computed (logits_to_keep), and of those the first T
    predict the completion tokens: logits at position P-1+t predict token P+t.
    """
    # BEGIN SOLUTION policy_logprobs
    seqs, attn = r.seqs[rows], r.attn[rows]  # [n, L]
    T = seqs.shape[1] - r.prompt_len
    logits = policy(input_ids=seqs, attention_mask=attn, logits_to_keep=T + 1, use_cache=False).logits
    return token_logprobs(logits[:, :-1], seqs[:, r.prompt_len:])  # [n, T]
    # END SOLUTION
