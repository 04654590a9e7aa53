"""The loss pass's last layer in chunks of positions: per-token log-probs from the last hidden states,
without ever holding the logits of all positions at once.

    z = W h            the LM head (W [V, d]) on one position's last hidden state h [d] (after the final norm)
    log p(x) = z_x - logsumexp(z)                                            (grpo.token_logprobs)

`rollout.logprobs` computes z for every row and position at once: [n, T, V], then a float32 copy and
logsumexp's temporary of the same size. With Qwen2.5's V = 151,936, 8 rows x 383 positions that is 1.7 GiB
per float32 copy. Here the n * T positions are cut into pieces of at most `chunk` positions; each piece
goes through the head and the log-softmax alone, so the largest logits tensor is [chunk, V]. Under
grad each piece is recomputed in the backward (torch.utils.checkpoint: it keeps only its input h, not its
logits), so the backward holds one piece's logits at a time too; the cost is one more head product per
piece. The values and gradients are those of `rollout.logprobs` up to float rounding
(tests/fast/test_chunked.py states the max difference). Our choice, the idea of Liger's fused linear + cross
entropy (Hsu et al. 2024) without its fused kernel.
"""
import torch
from torch.utils.checkpoint import checkpoint

from grpo import token_logprobs

CHUNK = 1024  # positions per piece (--logprob-chunk): 1024 x 151,936 float32 = 0.58 GiB per copy
NO_LOGITS = torch.tensor([], dtype=torch.long)  # logits_to_keep that keeps no position: the model's head skipped


def head_logprobs(head, hidden: torch.Tensor, tokens: torch.Tensor, chunk: int = CHUNK) -> torch.Tensor:
    """log p(tokens) [n, T] float32 from hidden [n, T, d] (the states that PREDICT tokens [n, T]) through
    head (the LM head, d -> V), `chunk` positions at a time (module docstring). Raises ValueError for chunk < 1."""
    if chunk < 1:
        raise ValueError(f"--logprob-chunk must be at least 1, got {chunk}")
    n, T, d = hidden.shape
    h, x = hidden.reshape(n * T, d), tokens.reshape(n * T)  # [n*T, d], [n*T]

    def piece(h_k, x_k):  # [c, d], [c] -> [c]: the only place logits exist, [c, V]
        return token_logprobs(head(h_k)[None], x_k[None])[0]

    recompute = torch.is_grad_enabled() and h.requires_grad  # keep h, not the logits, for the backward
    out = [checkpoint(piece, h[k:k + chunk], x[k:k + chunk], use_reentrant=False) if recompute
           else piece(h[k:k + chunk], x[k:k + chunk]) for k in range(0, n * T, chunk)]
    return torch.cat(out).view(n, T) if out else hidden.new_zeros(n, T, dtype=torch.float32)


def last_hidden(policy, **inputs) -> torch.Tensor:
    """The final-norm hidden states [n, L, d] of policy(**inputs), the head skipped (logits_to_keep keeps no
    position): what the head would turn into logits."""
    out = policy(**inputs, logits_to_keep=NO_LOGITS.to(inputs["input_ids"].device), output_hidden_states=True)
    return out.hidden_states[-1]


def logprobs(policy, r, rows=slice(None), chunk: int = CHUNK) -> torch.Tensor:
    """`rollout.logprobs(policy, r, rows)` [n, T] in pieces: the hidden states at positions P-1 .. P+T-2
    predict the completion tokens P .. P+T-1 (the same shift as rollout.logprobs's logits[:, :-1])."""
    seqs, attn = r.seqs[rows], r.attn[rows]  # [n, L]
    T = seqs.shape[1] - r.prompt_len
    h = last_hidden(policy, input_ids=seqs, attention_mask=attn, use_cache=False)  # [n, L, d]
    return head_logprobs(policy.get_output_embeddings(), h[:, -T - 1:-1], seqs[:, r.prompt_len:], chunk)  # [n, T]


class RowByRow:
    """update.role_backward's plain forward (--no-shared-prompt): micro-batches of --micro-batch rows, each
    forwarded whole, prompt and completion (rollout.logprobs, with the LM head in pieces of --logprob-chunk
    positions: logprobs above). The interface of shared_prompt.SharedPrompt: micro_batches(rows) -> row ids [n],
    logprobs(ids, reference) -> [n, T] (reference: the caller has turned the adapters off)."""

    def __init__(self, policy, r, micro_batch: int, logit_chunk: int = CHUNK):
        self.policy, self.r, self.micro_batch, self.logit_chunk = policy, r, micro_batch, logit_chunk

    def micro_batches(self, rows: list):
        rows = list(rows)
        return [torch.tensor(rows[k:k + self.micro_batch]) for k in range(0, len(rows), self.micro_batch)]

    def logprobs(self, ids: torch.Tensor, reference: bool = False) -> torch.Tensor:
        return logprobs(self.policy, self.r, ids, self.logit_chunk)  # rollout.logprobs, the LM head in pieces
