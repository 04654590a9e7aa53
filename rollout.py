"""Rollouts: sample completions from the policy and score them with per-token log-probs.

A `Rollout` is what travels from sampling to the loss (the tiny-grpo idea: one small dataclass).
Layout of every row, prompts LEFT-padded to a common width P, completions RIGHT-padded:

    seqs  [N, L]   pad pad p p p p | c c c EOS pad pad       (L = P + T)
    attn  [N, L]   0   0   1 1 1 1 | 1 1 1 1   1   1         (after the prompt: all ones)
    mask  [N, T]                   | 1 1 1 1   0   0         (completion up to its first EOS)

Rows are prompt-major: with n samples per prompt, row i*n + k is sample k of prompt i.
"""
import re
from dataclasses import dataclass

import torch
from transformers import StoppingCriteria, StoppingCriteriaList

from grpo import completion_mask, token_logprobs


@dataclass
class Rollout:
    # all tensors on the model's device
    seqs: torch.Tensor  # [N, L] token ids
    attn: torch.Tensor  # [N, L] 0/1 attention mask
    prompt_len: int  # P
    mask: torch.Tensor  # [N, T] float 0/1, completion tokens (positions, never pad ids)
    truncated: torch.Tensor  # [N] bool, no EOS within the token budget
    texts: list  # N decoded completions (special tokens removed)

    @property
    def valid(self) -> torch.Tensor:
        """[N] bool on the CPU, with the rewards: a non-empty completion (empty ones must not
        shift their group baseline)."""
        return torch.tensor([bool(t.strip()) for t in self.texts])


def encode_prompts(tok, chats: list, device) -> dict:
    """Chat messages -> left-padded input_ids/attention_mask [B, P] (the chat template adds specials)."""
    texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in chats]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)


def _finish(tok, seqs, prompt_attn, P, stop: str | None = None) -> Rollout:
    mask, truncated = completion_mask(seqs, P, tok.eos_token_id)  # [N, T], [N]
    attn = torch.cat([prompt_attn, torch.ones_like(seqs[:, P:])], dim=1)  # [N, L]
    texts = tok.batch_decode(seqs[:, P:] * mask.long() + tok.eos_token_id * (1 - mask.long()),
                             skip_special_tokens=True)
    if stop:  # a row that stopped on the pattern ends there; the EOS padding after it was never
        # sampled, so it stays out of the loss (and the row is not truncated)
        stopped = torch.tensor([bool(re.search(stop, t, re.S)) for t in texts], device=seqs.device)
        before_eos = mask.sum(1) - (~truncated).float()  # [N] tokens before the first EOS
        pos = torch.arange(mask.shape[1], device=seqs.device)  # [T]
        mask = torch.where(stopped[:, None], (pos[None, :] < before_eos[:, None]).float(), mask)
        truncated = truncated & ~stopped
    return Rollout(seqs, attn, P, mask, truncated, texts)


class StopOnPattern(StoppingCriteria):
    """Stop a row once its completion text matches `pattern` (e.g. a closed ``` block).

    generate() then pads the row with EOS (see `sample`); `_finish` ends that row's mask at the
    pattern, so only tokens the policy really sampled enter the loss, and the row is not truncated.
    """

    def __init__(self, tok, prompt_len: int, pattern: str):
        self.tok, self.P, self.pattern = tok, prompt_len, re.compile(pattern, re.S)

    def __call__(self, input_ids, scores, **kwargs) -> torch.Tensor:
        texts = self.tok.batch_decode(input_ids[:, self.P:], skip_special_tokens=True)
        return torch.tensor([bool(self.pattern.search(t)) for t in texts], device=input_ids.device)


@torch.no_grad()
def sample(policy, tok, chats: list, n: int, max_new_tokens: int, temperature: float = 1.0,
           top_p: float = 1.0, stop: str | None = None, min_new_tokens: int = 0) -> Rollout:
    """n completions for each chat (N = len(chats) * n rows). temperature 0 means greedy.

    stop: a regex; a row ends once its completion matches it. min_new_tokens: EOS is forbidden
    before that many tokens (benchmarks force equal lengths with it). Runs in eval mode (restored
    after) with the KV cache on (use_cache=True), also when gradient checkpointing is enabled;
    the active LoRA adapter is whatever the caller set.
    """
    device = next(policy.parameters()).device
    enc = encode_prompts(tok, chats, device)
    P = enc.input_ids.shape[1]
    greedy = temperature <= 0
    was_training = policy.training
    policy.eval()
    try:
        seqs = policy.generate(
            **enc, max_new_tokens=max_new_tokens, min_new_tokens=min_new_tokens, num_return_sequences=n,
            use_cache=True, do_sample=not greedy, temperature=None if greedy else temperature,
            top_p=None if greedy else top_p, top_k=None, pad_token_id=tok.eos_token_id,
            eos_token_id=tok.eos_token_id,
            stopping_criteria=StoppingCriteriaList([StopOnPattern(tok, P, stop)]) if stop else None)
    finally:
        policy.train(was_training)
    # seqs: [N, P + T]. Padding finished rows with EOS (not the tokenizer's pad, which differs for
    # Qwen) makes a stopped row end in one EOS, so completion_mask sees where it ended.
    if seqs.shape[1] == P:  # nothing generated at all: keep one EOS column so T >= 1
        seqs = torch.cat([seqs, torch.full_like(seqs[:, :1], tok.eos_token_id)], dim=1)
    return _finish(tok, seqs, enc.attention_mask.repeat_interleave(n, dim=0), P, stop)


def from_texts(tok, chats: list, completions: list, device="cpu") -> Rollout:
    """Teacher-forced rollout (cold-start SFT): each completion + EOS after its chat prompt."""
    enc = encode_prompts(tok, chats, device)
    P = enc.input_ids.shape[1]
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
