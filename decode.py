"""The sampler: prefill each prompt once, then our own decode loop that drops finished rows.

`generate` would copy each prompt n times, prefill all N = B * n copies, and keep decoding every row
until the longest one ends. Here (the vLLM ideas, in a few lines: prefix caching and continuous
batching without the scheduler):

    prefill   B distinct prompts [B, P]  -> KV cache [B, heads, P, d]  -> repeat each row n times: [N, ...]
    step t    A rows still running        -> one new token each: forward [A, 1] on the cache
              a row that sampled EOS or matched its stop pattern leaves the batch AND the cache

so a step costs the real lengths: one prompt per group, and each completion only up to its own end.

The sampling rule at step t, for row a with logits z_a = f(prompt, tokens so far) [V]:
    greedy (temperature 0):  x = argmax_v z_v                                   (the first maximum)
    else:                    p = softmax(z / temperature), restricted to the top-p nucleus
                             (the smallest set of most likely tokens with total mass >= top_p,
                             renormalised; HF's TopPLogitsWarper), x ~ p
    before min_new_tokens tokens, EOS is forbidden (z_eos = -inf; HF's MinNewTokensLengthLogitsProcessor).
The recorded log-prob of x is log softmax(z)_x: the policy itself at temperature 1, as the trainer
scores it (rollout.logprobs), not the tempered or truncated sampling distribution. No other logits
processing runs (a model's generation_config, e.g. a repetition penalty, is not applied).

Positions follow `generate`: a left-padded prompt's tokens get 0, 1, ... from its first real token
(cumsum of the attention mask - 1), and each new token the next one; so greedy decoding gives
exactly `generate`'s tokens (tests/test_decode.py).

Reading order: `decode` (the loop: prefill, then per token logits -> next_tokens -> append), `next_tokens`
(the rule above); after the marked line, the KV-cache bookkeeping a reader can skip: `Running` (the rows
still running, their mask, positions and cache), `BufferLayer` (a cache written in place), `new_cache`.
"""
import torch
from transformers.cache_utils import Cache, DynamicCache, DynamicLayer


@torch.no_grad()
def end_ids(eos_id, device) -> tuple[int, torch.Tensor, list[int]]:
    """eos_id (an int, or a list of the ids that end a row) -> (the id that pads, every ending id as a tensor [E]
    on `device`, and as a list on the host)."""
    ids = [eos_id] if isinstance(eos_id, int) else list(eos_id)
    return ids[0], torch.tensor(ids, device=device), ids


def decode(model, input_ids, attention_mask, n: int, max_new_tokens: int, eos_id: int, temperature: float = 1.0,
           top_p: float = 1.0, min_new_tokens: int = 0, stopped=None) -> tuple[torch.Tensor, torch.Tensor]:
    """n completions of each of B left-padded prompts (module docstring). eos_id: one id, or a list of the ids
    that end a row (a generation config's every EOS: Qwen's <|im_end|> and <|endoftext|>; the first pads).

    input_ids, attention_mask: [B, P]; rows of the result are prompt-major (row b * n + k is sample k of
    prompt b). stopped(rows, tokens) -> [A] bool: called after each step with the ids [A] of the rows still
    running and their completions so far [A, t] (e.g. a stop pattern on the decoded text); True ends a row.
    Returns (tokens [N, T] long, EOS after each row's end, T = the longest completion; logp [N, T] float32,
    log softmax(z)_x of each sampled token, 0 after the row's end). Runs the model as it is (train or eval
    mode); the caller sets eval mode and the adapter.
    """
    eos_id, ends, _ = end_ids(eos_id, input_ids.device)  # the padding id, every id that ends a row [E]
    N = input_ids.shape[0] * n
    tokens = torch.full((N, max_new_tokens), eos_id, dtype=torch.long, device=input_ids.device)
    logp = torch.zeros(N, max_new_tokens, device=input_ids.device)
    batch = Running.prefill(model, input_ids, attention_mask, n, max_new_tokens)  # the KV-cache bookkeeping
    T = 0
    for t in range(max_new_tokens):
        z = batch.logits  # [A, V] float32: the next token's logits of each running row
        log_norm = z.logsumexp(-1)  # [A] log sum_v exp(z_v), before EOS is masked: the policy at temperature 1
        if t < min_new_tokens:
            z[:, ends] = float("-inf")
        x = next_tokens(z, temperature, top_p)  # [A]
        tokens[batch.rows, t] = x
        logp[batch.rows, t] = z.gather(1, x[:, None]).squeeze(1) - log_norm  # log softmax(z)_x (z_x not masked)
        T = t + 1
        done = torch.isin(x, ends)  # [A]
        if stopped is not None:
            done |= stopped(batch.rows, tokens[batch.rows, :T]).to(done.device)
        if t + 1 == max_new_tokens or done.all():
            break
        batch.drop(done)  # finished rows leave the batch and the cache
        batch.step(model, x[~done])  # one forward of one new token per running row
    return tokens[:, :T], logp[:, :T]


def top_p_filter(z: torch.Tensor, top_p: float) -> torch.Tensor:
    """z [A, V] with every token outside the top-p nucleus set to -inf (HF's TopPLogitsWarper): sort
    ascending, drop the tokens whose cumulative probability is <= 1 - top_p, always keep the most likely.

    >>> top_p_filter(torch.tensor([[0.5, 0.3, 0.15, 0.05]]).log(), 0.75).exp()
    tensor([[0.5000, 0.3000, 0.0000, 0.0000]])
    """
    sorted_z, order = torch.sort(z, descending=False)  # [A, V]
    drop = sorted_z.softmax(-1).cumsum(-1) <= 1 - top_p  # [A, V] the low tail holding <= 1 - top_p
    drop[:, -1] = False  # the most likely token stays
    return z.masked_fill(drop.scatter(1, order, drop), float("-inf"))


def nucleus(probs: torch.Tensor, top_p: float, k: int):
    """The top-p nucleus of each row of probs [A, V] found among its k most likely tokens, or None when some
    row's nucleus is larger than k. Returns (weights [A, k], ids [A, k]): the k most likely tokens of each row,
    most likely first, with weight p_v for a token of the nucleus and 0 outside it.

    The rule of top_p_filter in the descending order: a token is kept iff the tokens more likely than it hold
    less than top_p, i.e. the ascending tail up to and including it holds more than 1 - top_p (the same set,
    up to float rounding at its edge and the order of ties). The full sort of 8 x 49152 logits took 16 ms on
    2 cores, torch.topk about 1/5 of that; the draw then runs over k tokens instead of V (7 ms over V).
    """
    weights, ids = probs.topk(min(k, probs.shape[-1]), -1)  # [A, k] descending
    above = weights.cumsum(-1) - weights  # [A, k] the mass of the more likely tokens
    if k < probs.shape[-1] and (above[:, -1] + weights[:, -1] < top_p).any():
        return None  # the nucleus of some row reaches past its k-th token
    drop = above >= top_p  # [A, k]
    drop[:, 0] = False  # the most likely token stays (top-p 0 keeps it alone, as TopPLogitsWarper does)
    return weights.masked_fill(drop, 0.0), ids


NUCLEUS_TRIES = (64, 1024)  # the top-k sets the nucleus is looked for in before all V tokens (next_tokens)


def next_tokens(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """One token per row from logits [A, V] (float32, EOS already masked where forbidden) -> [A] long.

    temperature <= 0: argmax. Else one draw per row (torch.multinomial, the global RNG) from
    softmax(top_p_filter(logits / temperature, top_p)), HF's order: temperature first, then top-p; the
    nucleus is looked for among the 64 most likely tokens first (nucleus; at temperature 0.7 and top-p 0.95
    SmolLM2-135M's nucleus held at most 40 tokens in 2,912 decode steps), then the 1024, then all. At
    temperature 1.0 (TRL's default, the bench's) 53 of 240 steps needed more than 64, at most 556 tokens: the
    1024 (2 ms on 2 cores) spares them the full sort and the draw over V (15 + 10 ms).
    """
    if temperature <= 0:
        return logits.argmax(-1)
    p = (logits / temperature).softmax(-1)  # [A, V]
    if top_p >= 1.0:
        return torch.multinomial(p, 1).squeeze(1)
    for k in (*NUCLEUS_TRIES, p.shape[-1]):
        found = nucleus(p, top_p, k)
        if found is not None:
            weights, ids = found  # [A, k]
            return ids.gather(1, torch.multinomial(weights, 1)).squeeze(1)  # [A]


# ---- The KV-cache bookkeeping (a reader of the sampling loop can skip from here) ----


class Running:
    """The rows still running, with what the model needs to extend them: their ids among the N rows (`rows`
    [A]), attention mask [A, P + t], the next token's position [A, 1], the KV cache, and the logits of
    their next token [A, V] (float32)."""

    def __init__(self, rows, attn, pos, cache, logits):
        self.rows, self.attn, self.pos, self.cache, self.logits = rows, attn, pos, cache, logits

    @classmethod
    def prefill(cls, model, input_ids, attention_mask, n: int, max_new_tokens: int) -> "Running":
        """Forward the B prompts [B, P] once, then repeat each prompt's cache and logits n times: N rows."""
        B, P = input_ids.shape
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, P] as generate: pads 0, tokens 0, 1, ...
        cache = new_cache(model, P + max_new_tokens)
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, cache=cache,
                       use_cache=True, logits_to_keep=1).logits[:, -1].float()  # [B, V]
        cache.batch_repeat_interleave(n)  # [N, heads, P, d] per layer: each prompt computed once
        return cls(torch.arange(B * n, device=input_ids.device), attention_mask.repeat_interleave(n, 0),
                   pos[:, -1:].repeat_interleave(n, 0) + 1, cache, logits.repeat_interleave(n, 0))

    def drop(self, done: torch.Tensor) -> None:
        """Rows with done [A] True leave the batch and the cache (nothing is copied when none is done)."""
        if done.any():
            keep = (~done).nonzero().squeeze(1)  # [A']
            self.cache.batch_select_indices(keep)
            self.rows, self.attn, self.pos = self.rows[keep], self.attn[keep], self.pos[keep]

    def step(self, model, x: torch.Tensor) -> None:
        """Append token x [A] to every running row: one forward [A, 1] on the cache -> the next logits."""
        self.attn = torch.cat([self.attn, self.attn.new_ones(len(x), 1)], 1)  # [A, P + t + 1]
        self.logits = model(input_ids=x[:, None], attention_mask=self.attn, position_ids=self.pos, cache=self.cache,
                            use_cache=True).logits[:, -1].float()  # [A, V]
        self.pos = self.pos + 1


class BufferLayer(DynamicLayer):
    """One layer's KV cache in a buffer allocated once for `capacity` tokens: each step writes its key and
    value in place (DynamicLayer's torch.cat copies the whole cache every step: 17 % of a decode step of
    SmolLM2-135M at batch 8, measured with torch.profiler). keys/values are views [rows, heads, length, d]."""

    def __init__(self, capacity: int):
        super().__init__()
        self.capacity = capacity

    def lazy_initialization(self, key_states, value_states):
        super().lazy_initialization(key_states, value_states)
        B, H, _, _ = key_states.shape
        self.kbuf = key_states.new_empty(B, H, self.capacity, key_states.shape[-1])
        self.vbuf = value_states.new_empty(B, H, self.capacity, value_states.shape[-1])
        self.length = 0

    def _views(self):
        self.keys, self.values = self.kbuf[:, :, :self.length], self.vbuf[:, :, :self.length]

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        n = key_states.shape[-2]
        if self.length + n > self.capacity:
            raise ValueError(f"KV buffer of {self.capacity} tokens is full")
        self.kbuf[:, :, self.length:self.length + n] = key_states
        self.vbuf[:, :, self.length:self.length + n] = value_states
        self.length += n
        self._views()
        return self.keys, self.values

    def batch_repeat_interleave(self, repeats: int):
        if not self.is_initialized:
            return
        self.kbuf, self.vbuf = self.kbuf.repeat_interleave(repeats, 0), self.vbuf.repeat_interleave(repeats, 0)
        self._views()

    def batch_select_indices(self, indices: torch.Tensor):
        if not self.is_initialized:
            return
        for name in ("kbuf", "vbuf"):  # a new buffer with the kept rows; only the filled part is copied
            old = getattr(self, name)
            new = old.new_empty(len(indices), *old.shape[1:])
            new[:, :, :self.length] = old[indices, :, :self.length]
            setattr(self, name, new)
        self._views()


def new_cache(model, capacity: int) -> Cache:
    """A KV cache for `model` with room for `capacity` tokens per row: BufferLayers when every layer is full
    attention (Llama, Qwen2 without a sliding window), else transformers' DynamicCache for the model."""
    config = model.config.get_text_config(decoder=True)
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    if any(t != "full_attention" for t in types):
        return DynamicCache(config=config)
    return Cache(layers=[BufferLayer(capacity) for _ in range(config.num_hidden_layers)])
