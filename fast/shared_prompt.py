"""The fast path of the loss pass: each group's prompt forwarded once for all its rows (--shared-prompt, on
by default). The values and gradients are those of the row-by-row `rollout.logprobs` (tests/fast/test_shared_prompt.py
checks it); a reader who wants the algorithm can skip this file: chunked.RowByRow is the plain path.

The idea is PrefixGrouper's shared-prefix forward (2025). The n rows of a group share their prompt
(rollout.Rollout.n), so rather than forwarding prompt + completion for each row:

    prompt pass      prompts [u, P - s]  -> last hidden state [u, 1, d] (predicts completion token 0)
                                            + KV cache [u, heads, P - s, d] per layer
    gather           cache rows -> [n, heads, P - s, d] (each row its own prompt; the backward sums them)
    completion pass  tokens 0..Tm-2 [n, Tm-1] on that cache -> hidden states [n, Tm-1, d] (predict tokens 1..Tm-1)
    log-probs        [n, Tm, d] through the LM head in pieces of --logprob-chunk positions (fast/chunked.py): no
                     [n, Tm, V] logits tensor

Cost: u * (P - s) + n * (Tm - 1) token positions instead of n * (P + T). A prompt is forwarded once per role
update however many micro-batches its rows fill: its pass is kept detached (`PromptPass`), each
micro-batch's backward leaves its gradient on the prompt's keys and values, and one backward through the
prompt pass follows the last micro-batch of its rows (chain rule: dL/dtheta = sum over the reads of
dL/dleaf * dleaf/dtheta, summed before one backward). Our choice: memory stays that of --micro-batch rows
plus the graphs of one chunk's prompts (--prompts-per-chunk of them: fewer, less memory; more, fewer
passes). Not under gradient checkpointing: transformers drops the cache inside the layers
(`usable`), so update.py takes the row-by-row path there.
"""
from contextlib import nullcontext
from dataclasses import dataclass

import torch
from transformers import DynamicCache

from fast import chunked


def usable(policy) -> bool:
    """False under gradient checkpointing in training: transformers drops the cache inside the layers, so the
    prompt's keys and values cannot be reused; callers score row by row then."""
    return not (torch.is_grad_enabled() and policy.training and getattr(policy, "is_activation_checkpointing", False))


class SharedPrompt:
    """update.role_backward's forward with shared prompts: `micro_batches(rows)` yields row ids [n] (each
    micro-batch inside one chunk of at most `per_chunk` prompts, --prompts-per-chunk), `logprobs(ids)` [n, T];
    after a chunk's last micro-batch (its loss backward done) the generator runs the chunk's prompt backward
    (timed as policy_forward_backward). The reference (reference=True, called under no_grad with the adapters
    off) gets its own prompt pass. logit_chunk: positions per piece of the LM head (fast/chunked.py)."""

    def __init__(self, policy, r, micro_batch: int, clock=None, per_chunk: int = 2, logit_chunk: int = chunked.CHUNK):
        self.policy, self.r, self.micro_batch, self.clock = policy, r, micro_batch, clock
        self.per_chunk, self.logit_chunk = per_chunk, logit_chunk
        self.passes = {}  # the current chunk's prompt passes: {False: the policy's, True: the reference's}

    def micro_batches(self, rows: list):
        for chunk in prompt_chunks(list(rows), self.r.n, self.per_chunk):
            self.prompts, self.passes = torch.unique(torch.tensor(chunk) // self.r.n), {}
            for k in range(0, len(chunk), self.micro_batch):
                yield torch.tensor(chunk[k:k + self.micro_batch])
            if False in self.passes:  # the prompt pass once, with the sum of its micro-batches' gradients
                with self.clock("policy_forward_backward") if self.clock else nullcontext():
                    self.passes[False].backward()

    def logprobs(self, ids: torch.Tensor, reference: bool = False) -> torch.Tensor:
        if reference not in self.passes:
            self.passes[reference] = prompt_pass(self.policy, self.r, self.prompts, detach=not reference)
        return completion_logprobs(self.policy, self.r, ids, self.passes[reference], self.logit_chunk)


def prompt_chunks(rows: list, n: int, per_chunk: int) -> list:
    """rows (ascending row ids; row i belongs to prompt i // n) -> lists of rows, each holding all the rows
    of at most `per_chunk` prompts, in order. E.g. rows [0, 1, 2, 5, 6, 9], n = 4, per_chunk 1 ->
    [[0, 1, 2], [5, 6], [9]]; per_chunk 2 -> [[0, 1, 2, 5, 6], [9]]."""
    groups = {}
    for i in rows:
        groups.setdefault(i // n, []).append(i)
    prompts = list(groups.values())
    return [sum(prompts[k:k + per_chunk], []) for k in range(0, len(prompts), per_chunk)]


@dataclass
class PromptPass:
    """The prompt pass of u distinct prompts of a Rollout, kept to be reused by their rows' completions.

    prompts [u] prompt ids, ascending (row i*n + k belongs to prompt i); s: the first column that is not padding in
    all u (columns s..P-1 were forwarded); first [u, 1, d]: the last hidden state of the prompts' last position
    (it predicts completion token 0); kv: per layer (keys, values), each [u, heads, P - s, d].
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
        """Backpropagate the gradients the completion passes left on the leaves through the prompt pass."""
        pairs = [(o, x.grad) for o, x in zip(self.outputs or [], self.leaves()) if x.grad is not None]
        if pairs:
            torch.autograd.backward([o for o, _ in pairs], [g for _, g in pairs])


def prompt_pass(policy, r, prompts: torch.Tensor, detach: bool = False) -> PromptPass:
    """Forward the prompts `prompts` [u] (ascending) of the Rollout r once (with grad when grad is on): the
    module docstring's prompt pass. s is the first column that is not padding in all u prompts; positions
    are those of `rollout.logprobs` (column s has position s). detach=True cuts the outputs from the graph
    and keeps them (PromptPass.backward), so that several micro-batches share one prompt pass."""
    P, first = r.prompt_len, prompts * r.n  # one row of each prompt
    s = int(r.attn[first, :P].any(0).nonzero()[0]) if P else 0  # leading columns that are padding in all u
    cache = DynamicCache(config=policy.config)
    positions = torch.arange(s, P, device=r.seqs.device)[None]  # [1, P - s]
    hidden = chunked.last_hidden(policy, input_ids=r.seqs[first, s:P], attention_mask=r.attn[first, s:P],
                                 position_ids=positions, cache=cache, use_cache=True)[:, -1:]  # [u, 1, d]
    kv = [(layer.keys, layer.values) for layer in cache.layers]
    pp = PromptPass(prompts, s, hidden, kv)
    if detach:
        outputs = pp.leaves()
        cut = [x.detach().requires_grad_(x.requires_grad) for x in outputs]
        pp = PromptPass(prompts, s, cut[0], list(zip(cut[1::2], cut[2::2])), outputs)
    return pp


def completion_logprobs(policy, r, ids: torch.Tensor, pp: PromptPass,
                        logit_chunk: int = chunked.CHUNK) -> torch.Tensor:
    """`rollout.logprobs(policy, r, ids)` [n, T] from a PromptPass that holds the prompts of all rows `ids` [n]:
    completion tokens 0..Tm-2 [n, Tm-1] forwarded on the rows' cached prompts (Tm: the last masked position
    of these rows + 1; log-probs after it are 0, outside every row's mask, so in no loss); the LM head in
    pieces of logit_chunk positions (chunked.head_logprobs)."""
    P, T = r.prompt_len, r.seqs.shape[1] - r.prompt_len
    inverse = torch.searchsorted(pp.prompts, ids // r.n)  # [n] row -> its prompt's place (prompts ascending)
    on = r.mask[ids].any(0).nonzero()  # masked completion positions of these rows
    Tm = int(on[-1]) + 1 if len(on) else 1
    hidden = pp.first[inverse]  # [n, 1, d]
    if Tm > 1:
        cache = DynamicCache(config=policy.config)
        for layer, (k, v) in enumerate(pp.kv):
            cache.update(k[inverse], v[inverse], layer)  # [n, heads, P - s, d]: each row its own prompt
        positions = torch.arange(P, P + Tm - 1, device=r.seqs.device)[None]  # [1, Tm - 1]
        rest = chunked.last_hidden(policy, input_ids=r.seqs[ids, P:P + Tm - 1],
                                   attention_mask=r.attn[ids, pp.s:P + Tm - 1], position_ids=positions,
                                   cache=cache, use_cache=True)  # [n, Tm-1, d]
        hidden = torch.cat([hidden, rest], dim=1)  # [n, Tm, d]
    head = policy.get_output_embeddings()
    lp = chunked.head_logprobs(head, hidden, r.seqs[ids, P:P + Tm], logit_chunk)  # [n, Tm]
    return torch.nn.functional.pad(lp, (0, T - Tm))  # [n, T]
