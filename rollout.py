"""Rollouts: sample completions from the policy and score them with per-token log-probs.

A `Rollout` is what travels from sampling to the loss (the tiny-grpo idea: one small dataclass).
Layout of every row, prompts LEFT-padded to a common width P, completions RIGHT-padded:

    seqs  [N, L]   pad pad p p p p | c c c EOS pad pad       (L = P + T)
    attn  [N, L]   0   0   1 1 1 1 | 1 1 1 1   1   1         (after the prompt: all ones)
    mask  [N, T]                   | 1 1 1 1   0   0         (completion up to its first EOS)

Rows are prompt-major: with n samples per prompt, row i*n + k is sample k of prompt i, so rows
i*n .. i*n + n-1 share their prompt (`Rollout.n`): the sampler prefills it once (decode.py) and the
loss pass forwards it once (`prompt_pass`, then `completion_logprobs` for its rows).
"""
import re
from dataclasses import dataclass

import torch
from transformers import DynamicCache

import cpu_linear
import decode
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
    n: int = 1  # rows per prompt: rows i*n .. i*n + n-1 share prompt i
    logp: torch.Tensor | None = None  # [N, T] the sampler's log-probs of its tokens (0 outside the mask); None: not sampled

    @property
    def valid(self) -> torch.Tensor:
        """[N] bool on the CPU, with the rewards: a non-empty completion (empty ones must not
        shift their group baseline)."""
        return torch.tensor([bool(t.strip()) for t in self.texts])


def encode_prompts(tok, chats: list, device) -> dict:
    """Chat messages -> left-padded input_ids/attention_mask [B, P] (the chat template adds specials).
    A chat whose last message is the assistant's is a reply begun (StepCoder's prefix): the prompt ends
    with that text, and the completion continues it."""
    texts = [tok.apply_chat_template(c[:-1], tokenize=False, add_generation_prompt=True) + c[-1]["content"]
             if c[-1]["role"] == "assistant" else tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True)
             for c in chats]
    return tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(device)


def _finish(tok, seqs, prompt_attn, P, stop: str | None = None, n: int = 1) -> Rollout:
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
    return Rollout(seqs, attn, P, mask, truncated, texts, n)


def stop_on_pattern(tok, pattern: str):
    """decode.decode's `stopped`: a row ends once its completion text matches `pattern` (e.g. a closed
    ``` block). The sampler pads it with EOS after that; `_finish` ends its mask at the pattern, so only
    tokens the policy really sampled enter the loss, and the row is not truncated."""
    regex = re.compile(pattern, re.S)

    def stopped(rows, tokens):  # rows [A], tokens [A, t]
        return torch.tensor([bool(regex.search(t)) for t in tok.batch_decode(tokens, skip_special_tokens=True)])
    return stopped


@torch.no_grad()
def sample(policy, tok, chats: list, n: int, max_new_tokens: int, temperature: float = 1.0,
           top_p: float = 1.0, stop: str | None = None, min_new_tokens: int = 0) -> Rollout:
    """n completions for each chat (N = len(chats) * n rows). temperature 0 means greedy.

    stop: a regex; a row ends once its completion matches it. min_new_tokens: EOS is forbidden
    before that many tokens (benchmarks force equal lengths with it). decode.decode does the work: each
    chat's prompt prefilled once, finished rows dropped, the KV cache on also when gradient
    checkpointing is enabled. Runs in eval mode (restored after); the active LoRA adapter is whatever
    the caller set (on a CPU in float32 merged into the weights for the rollout: cpu_linear.sampling_weights).
    The Rollout's logp holds the sampler's log-probs (decode.py: the policy at
    temperature 1, as `logprobs` scores the same tokens).
    """
    device = next(policy.parameters()).device
    enc = encode_prompts(tok, chats, device)
    P = enc.input_ids.shape[1]
    was_training = policy.training
    policy.eval()
    try:
        with torch.no_grad(), cpu_linear.sampling_weights(policy, len(chats) * n):  # CPU: LoRA merged, packed
            comp, logp = decode.decode(policy, enc.input_ids, enc.attention_mask, n, max_new_tokens, tok.eos_token_id,
                                       temperature, top_p, min_new_tokens, stop_on_pattern(tok, stop) if stop else None)
    finally:
        policy.train(was_training)
    # comp: [N, T], EOS after each row's end (not the tokenizer's pad, which differs for Qwen): a stopped
    # row ends in one EOS, so completion_mask sees where it ended.
    if comp.shape[1] == 0:  # nothing generated at all: keep one EOS column so T >= 1
        comp, logp = torch.full_like(comp[:, :1], tok.eos_token_id), torch.zeros(comp.shape[0], 1, device=device)
    seqs = torch.cat([enc.input_ids.repeat_interleave(n, dim=0), comp], dim=1)  # [N, P + T]
    r = _finish(tok, seqs, enc.attention_mask.repeat_interleave(n, dim=0), P, stop, n)
    r.logp = logp * r.mask
    return r


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


@dataclass
class PromptPass:
    """The prompt pass of u distinct prompts of a Rollout, kept to be reused by their rows' completions.

    prompts [u] prompt ids, ascending (row i*n + k belongs to prompt i); s: the first column that is not padding in
    all u (columns s..P-1 were forwarded); first [u, 1, V]: the logits of the prompts' last position
    (they predict completion token 0); kv: per layer (keys, values), each [u, heads, P - s, d].
    Made with detach=True (prompt_pass), first and kv are leaves: every completion pass that reads them
    adds its gradient to theirs, and `backward` carries the sum through the prompt pass once.
    """
    prompts: torch.Tensor
    s: int
    first: torch.Tensor
    kv: list
    outputs: list | None = None  # detach=True: the prompt pass's own tensors, in the order of leaves()

    def leaves(self) -> list:
        return [self.first] + [x for pair in self.kv for x in pair]

    def backward(self) -> None:
        """Backpropagate the gradients the completion passes left on the leaves through the prompt pass
        (chain rule: dL/dtheta = sum over reads of dL/dleaf * dleaf/dtheta, summed before one backward)."""
        pairs = [(o, x.grad) for o, x in zip(self.outputs or [], self.leaves()) if x.grad is not None]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])


def prompt_pass(policy, r: Rollout, prompts: torch.Tensor, detach: bool = False) -> PromptPass:
    """Forward the prompts `prompts` [u] (ascending) of r once (with grad when grad is on): the first half of
    PrefixGrouper's shared-prefix forward (2025). Its keys and values are reused by every completion of
    those prompts (`completion_logprobs`), and backpropagation runs through both, so values and gradients
    are the row-by-row `logprobs`' ones:
        prompt pass      prompts [u, P - s]  -> logits [u, 1, V] (predict completion token 0)
                                                + KV cache [u, heads, P - s, d] per layer
        gather           cache rows -> [n, heads, P - s, d] (each row its own prompt; the backward sums them)
        completion pass  tokens 0..Tm-2 [n, Tm-1] on that cache -> logits [n, Tm-1, V] (predict tokens 1..Tm-1)
    s is the first column that is not padding in all u prompts; positions are those of `logprobs` (column
    s has position s). Cost: u * (P - s) + n * (Tm - 1) token positions instead of n * (P + T).
    detach=True cuts the outputs from the graph and keeps them (PromptPass.backward), so that several
    micro-batches of completions share one prompt pass and its backward runs once (our choice: memory stays
    that of --micro-batch rows plus the prompts, and each prompt is forwarded once per role update).
    Not under gradient checkpointing: transformers drops the cache inside the layers (`checkpointing`).
    """
    P, first = r.prompt_len, prompts * r.n  # one row of each prompt
    s = int(r.attn[first, :P].any(0).nonzero()[0]) if P else 0  # leading columns that are padding in all u
    cache = DynamicCache(config=policy.config)
    positions = torch.arange(s, P, device=r.seqs.device)[None]  # [1, P - s]
    logits = policy(input_ids=r.seqs[first, s:P], attention_mask=r.attn[first, s:P], position_ids=positions,
                    cache=cache, use_cache=True, logits_to_keep=1).logits  # [u, 1, V]
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    pp = PromptPass(prompts, s, logits, kv)
    if detach:
        outputs = pp.leaves()
        cut = [x.detach().requires_grad_(x.requires_grad) for x in outputs]
        pp = PromptPass(prompts, s, cut[0], list(zip(cut[1::2], cut[2::2])), outputs)
    return pp


def completion_logprobs(policy, r: Rollout, ids: torch.Tensor, pp: PromptPass) -> torch.Tensor:
    """`logprobs(policy, r, ids)` [n, T] from a PromptPass that holds the prompts of all rows `ids` [n]:
    completion tokens 0..Tm-2 [n, Tm-1] forwarded on the rows' cached prompts (Tm: the last masked position
    of these rows + 1; log-probs after it are 0, outside every row's mask, so in no loss)."""
    P, T = r.prompt_len, r.seqs.shape[1] - r.prompt_len
    inverse = torch.searchsorted(pp.prompts, ids // r.n)  # [n] row -> its prompt's place (prompts ascending)
    on = r.mask[ids].any(0).nonzero()  # masked completion positions of these rows
    Tm = int(on[-1]) + 1 if len(on) else 1
    logits = pp.first[inverse]  # [n, 1, V]
    if Tm > 1:
        cache = DynamicCache(config=policy.config)
        for layer, (k, v) in enumerate(pp.kv):
            cache.update(k[inverse], v[inverse], layer)  # [n, heads, P - s, d]: each row its own prompt
        positions = torch.arange(P, P + Tm - 1, device=r.seqs.device)[None]  # [1, Tm - 1]
        rest = policy(input_ids=r.seqs[ids, P:P + Tm - 1], attention_mask=r.attn[ids, pp.s:P + Tm - 1],
                      position_ids=positions, cache=cache, use_cache=True).logits  # [n, Tm-1, V]
        logits = torch.cat([logits, rest], dim=1)  # [n, Tm, V]
    lp = token_logprobs(logits, r.seqs[ids, P:P + Tm])  # [n, Tm]
    return torch.nn.functional.pad(lp, (0, T - Tm))  # [n, T]


def checkpointing(policy) -> bool:
    """Gradient checkpointing on: transformers drops the cache inside the layers, so the shared-prompt
    passes cannot run; callers use the row-by-row `logprobs` then."""
    return torch.is_grad_enabled() and policy.training and getattr(policy, "is_activation_checkpointing", False)
