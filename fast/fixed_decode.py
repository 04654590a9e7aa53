"""The sampler with fixed shapes, for a GPU: every row stays in the batch until the end, so every token step
runs the same kernels on tensors of the same shapes and the host need not wait for the device.

decode.py drops a finished row from the batch and its KV cache: on a CPU that saves its compute. On a GPU a
token step is a few milliseconds of kernels, and what costs is the host: each step there read the device
(`done.all()`, `nonzero`, the stop test's `tolist`), so the host waited for the GPU before it could queue the
next step, and each dropped row copied every layer's cache. Here (rollout.sample picks it on CUDA):

    prefill   as decode.py: B prompts once, each prompt's cache repeated n times: [N, heads, P, d]
    buffer    each layer's keys and values preallocated for P + max_new_tokens positions (zeros)
    step t    all N rows: one token each at position P + t, attention over the whole buffer with a mask
              [N, 1, 1, P + max_new_tokens] (the prompt's real tokens and the tokens written so far)
              a finished row (EOS sampled, or stopped) keeps running, its new tokens replaced by EOS, log-prob 0
    stop test every `check_every` steps: ONE copy to the host of the new tokens since the last test and of
              the rows' done flags; the stop rule (e.g. the Coder's closed fence) runs on the host then, and a
              row that matched in between is cut back to the first step it matched

So a token step reads nothing from the device: one host sync per `check_every` steps. With graph=True on
CUDA the one-token step is captured once as a CUDA graph (torch.cuda.graph) and replayed: one launch per
step instead of one per kernel.

The sampling rule is decode.py's; the top-p nucleus is found among all V tokens at once (`next_tokens`).
Same tokens as decode.py for the same seed (tests/fast/test_fixed_decode.py): greedy always; sampled as long as no
row has finished (after that decode.py draws for the running rows only, this loop for all N: the same
distribution per row, other random numbers), with top-p when decode.py too looks among all V
(NUCLEUS_TRIES = (): its 64 and 1024 draw other random numbers for the same distribution).
"""
import torch
from transformers.cache_utils import Cache

import decode

GRAPH = False  # train.py --cuda-graph: capture the one-token step as a CUDA graph in every call


@torch.no_grad()
def decode_fixed(model, input_ids, attention_mask, n: int, max_new_tokens: int, eos_id: int, temperature: float = 1.0,
                 top_p: float = 1.0, min_new_tokens: int = 0, stopped=None, check_every: int = 8,
                 graph: bool = False) -> tuple[torch.Tensor, torch.Tensor]:
    """decode.decode's contract (tokens [N, T], EOS after each row's end; logp [N, T], 0 after it; T = the
    longest completion) with fixed shapes (module docstring). stopped(rows, tokens) -> [A] bool runs on the
    host every `check_every` steps on the rows still running. graph: capture the step as a CUDA graph (CUDA only)."""
    B, P = input_ids.shape
    N, dev = B * n, input_ids.device
    eos_id, ends, end_list = decode.end_ids(eos_id, dev)  # the padding id, every ending id [E] (and on the host)
    tokens = torch.full((N, max_new_tokens), eos_id, dtype=torch.long, device=dev)
    logp = torch.zeros(N, max_new_tokens, device=dev)
    step = Step.prefill(model, input_ids, attention_mask, n, max_new_tokens)  # the cache and mask bookkeeping
    if (graph or GRAPH) and dev.type == "cuda" and max_new_tokens > 1:
        step.capture()
    done = torch.zeros(N, dtype=torch.bool, device=dev)
    host = [[] for _ in range(N)]  # the tokens the host has seen of each row (the stop rule's input)
    end = [None] * N  # the step at which each row ended (its EOS, or where it matched the stop rule)
    checked = 0  # steps whose tokens the host has seen
    for t in range(max_new_tokens):
        z = step.logits  # [N, V] float32
        log_norm = z.logsumexp(-1)  # [N] before EOS is masked: the policy at temperature 1
        if t < min_new_tokens:
            z[:, ends] = float("-inf")
        x = torch.where(done, eos_id, next_tokens(z, temperature, top_p))  # [N] a finished row writes EOS
        tokens[:, t] = x
        logp[:, t] = torch.where(done, 0.0, z.gather(1, x[:, None]).squeeze(1) - log_norm)
        done |= torch.isin(x, ends)
        last = t + 1 == max_new_tokens
        if last or (t + 1) % check_every == 0:  # the one host sync of these steps
            new = torch.cat([tokens[:, checked:t + 1], done[:, None].long()], 1).tolist()  # [N, k + 1]
            matched = stop_test(new, host, end, checked, stopped, end_list)
            checked = t + 1
            if all(e is not None for e in end):
                break
            if matched:  # the rows the stop rule ended write EOS from now on (a copy to the device, not a read)
                done[torch.tensor(matched, device=dev)] = True
        if not last:
            step.run(x)  # one token for each of the N rows
    for i, e in enumerate(end):  # a row that matched the stop rule between two tests: cut back to its match
        if e is not None:
            tokens[i, e + 1:], logp[i, e + 1:] = eos_id, 0.0
    T = max((e + 1 if e is not None else checked) for e in end) if N else 0
    return tokens[:, :T], logp[:, :T]


def stop_test(new: list, host: list, end: list, start: int, stopped, end_list: list) -> list:
    """The host's part of the loop, every check_every steps: new [N][k + 1] (the k new tokens of each row, then
    its done flag) extends host [N][...]; end[i] gets the step row i ended at: the first step from `start` at
    which stopped() matches its tokens, else its first id of end_list (stopped runs once on every open row, then again
    only on the rows that matched, to find where). Returns the rows the stop rule ended now."""
    rows = [i for i in range(len(host)) if end[i] is None]  # the rows open before these steps
    for i, row in enumerate(new):
        host[i].extend(row[:-1])
    ends = set(end_list)  # every id that ends a row
    eos = {i: next(s for s in range(start, len(host[i])) if host[i][s] in ends)  # done on the device: an EOS
           for i in rows if new[i][-1]}  # among the new
    matched = []
    if stopped is not None and rows:
        hits = as_list(stopped(torch.tensor(rows), torch.tensor([host[i] for i in rows])))
        for i in (i for i, h in zip(rows, hits) if h):
            first = next((s for s in range(start, eos.get(i, len(host[i]) - 1) + 1)
                          if as_list(stopped(torch.tensor([i]), torch.tensor([host[i][:s + 1]])))[0]), None)
            if first is not None:
                end[i] = first
                matched.append(i)
    for i, s in eos.items():
        if end[i] is None:
            end[i] = s
    return matched


def as_list(hit) -> list:
    """The stop rule's answer [A] as a list (a tensor it returns is on the host already: no device read)."""
    return hit.tolist() if isinstance(hit, torch.Tensor) else list(hit)


def next_tokens(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """decode.next_tokens without reading the device: the top-p nucleus among all V tokens (decode.nucleus with
    k = V), never first among the 64 or 1024 most likely (whether those hold it is a test that reads the device).
    The same rule and distribution; on a GPU the sort of V logits per row is a fraction of a millisecond."""
    if temperature <= 0 or top_p >= 1.0:
        return decode.next_tokens(logits, temperature, top_p)  # argmax, or one draw over all V: no test
    p = (logits / temperature).softmax(-1)  # [N, V]
    weights, ids = decode.nucleus(p, top_p, p.shape[-1])  # [N, V] most likely first, 0 outside the nucleus
    return ids.gather(1, torch.multinomial(weights, 1)).squeeze(1)  # [N]


# ---- The fixed-shape cache, mask and step (a reader of the loop can skip from here) ----


class Step:
    """The one-token step on all N rows, with everything it reads and writes preallocated: the cache (StaticLayer
    per layer, writing at `at`), the attention mask `allowed` [N, P + max_new_tokens] bool, the positions [N, 1],
    and the next logits [N, V] float32. run(x) updates them all in place: the same shapes every step, so a CUDA
    graph can capture it (capture())."""

    def __init__(self, model, cache, allowed, pos, at, logits):
        self.model, self.cache, self.allowed, self.pos, self.at, self.logits = model, cache, allowed, pos, at, logits
        self.x = torch.zeros(len(pos), dtype=torch.long, device=pos.device)  # the step's input tokens [N]
        self.graph = None

    @classmethod
    def prefill(cls, model, input_ids, attention_mask, n: int, max_new_tokens: int) -> "Step":
        B, P = input_ids.shape
        at = torch.tensor([P], device=input_ids.device)  # the buffer position the next step writes
        cache = static_cache(model, P + max_new_tokens, at)
        pos = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)  # [B, P] as generate: pads 0, tokens 0, 1, ...
        logits = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=pos, cache=cache,
                       use_cache=True, logits_to_keep=1).logits[:, -1].float()  # [B, V]
        cache.batch_repeat_interleave(n)
        for layer in cache.layers:
            layer.stepping = True
        allowed = torch.cat([attention_mask.bool(), attention_mask.new_zeros(B, max_new_tokens).bool()], 1)
        return cls(model, cache, allowed.repeat_interleave(n, 0), pos[:, -1:].repeat_interleave(n, 0) + 1, at,
                   logits.repeat_interleave(n, 0))

    def forward(self) -> None:
        """The step on self.x: write at `at`, attend over the whole buffer, advance positions and `at`."""
        self.allowed.index_fill_(1, self.at, True)
        dtype = self.model.get_input_embeddings().weight.dtype
        mask = torch.zeros(self.allowed.shape, dtype=dtype, device=self.allowed.device)
        mask = mask.masked_fill(~self.allowed, torch.finfo(dtype).min)[:, None, None, :]  # [N, 1, 1, L] additive
        out = self.model(input_ids=self.x[:, None], attention_mask=mask, position_ids=self.pos, cache=self.cache,
                         use_cache=True).logits[:, -1].float()  # [N, V]
        self.logits.copy_(out)
        self.pos.add_(1)
        self.at.add_(1)

    def run(self, x: torch.Tensor) -> None:
        self.x.copy_(x)
        if self.graph is not None:
            self.graph.replay()
        else:
            self.forward()

    def capture(self) -> None:
        """Record forward() once as a CUDA graph (after a warm-up on a side stream, as torch.cuda.graphs asks);
        run() replays it. The warm-up and the capture each advance the step, so both are undone."""
        saved = [t.clone() for t in (self.allowed, self.pos, self.at, self.logits)]
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            self.forward()
        torch.cuda.current_stream().wait_stream(side)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.forward()
        for t, s in zip((self.allowed, self.pos, self.at, self.logits), saved):
            t.copy_(s)  # the buffer positions written meanwhile are masked again and rewritten by the real steps


class StaticLayer(decode.BufferLayer):
    """decode.BufferLayer (the prompt's keys and values written in place) that, once `stepping`, writes each
    one-token step at position `at` (a device tensor, not a Python int: no host read, the same graph every step)
    and returns the WHOLE buffers [N, heads, capacity, d]: the step's mask hides what is not written yet.
    The buffers start as zeros: a masked position gets weight exactly 0, and 0 * 0 stays 0 (0 * NaN would not)."""

    def __init__(self, capacity: int, at: torch.Tensor):
        super().__init__(capacity)
        self.at, self.stepping = at, False

    def lazy_initialization(self, key_states, value_states):
        super().lazy_initialization(key_states, value_states)
        self.kbuf.zero_()
        self.vbuf.zero_()

    def update(self, key_states, value_states, *args, **kwargs):
        if not self.stepping:
            return super().update(key_states, value_states, *args, **kwargs)
        self.kbuf.index_copy_(2, self.at, key_states)
        self.vbuf.index_copy_(2, self.at, value_states)
        return self.kbuf, self.vbuf


def supported(model) -> bool:
    """Whether every layer of `model` is full attention: a sliding window would need its window in the step's
    mask, which this loop does not build (rollout.sample runs decode.py for such a model)."""
    config = model.config.get_text_config(decoder=True)
    types = getattr(config, "layer_types", None) or ["full_attention"] * config.num_hidden_layers
    return all(t == "full_attention" for t in types)


def static_cache(model, capacity: int, at: torch.Tensor) -> Cache:
    """StaticLayers for `model`; raises ValueError for a model `supported` refuses."""
    if not supported(model):
        raise ValueError("the fixed-shape sampler needs full attention in every layer (use decode.decode)")
    layers = model.config.get_text_config(decoder=True).num_hidden_layers
    return Cache(layers=[StaticLayer(capacity, at) for _ in range(layers)])
