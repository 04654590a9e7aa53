"""Completions of fixed lengths, so that compared systems do the same work (bench/grpo_bench.py, gpu_memory.py).

    fix_lengths(policy, tok, None)       rollout.sample with every completion forced to its whole token budget
    fix_lengths(policy, tok, lengths)    completion i ends with EOS after lengths[i] tokens (EOS forbidden before)

Our samplers (decode.py, fast/fixed_decode.py) get the rule through their next-token choice; transformers'
`generate` (TRL's sampler, and an earlier tree's) through a logits processor (length_processor). No stop pattern.
"""


def length_processor(lengths, eos_id: int):
    """A transformers LogitsProcessor for `generate` (TRL, the earlier code): row i of the batch gets EOS
    forbidden before lengths[i] - 1 new tokens and forced at that position."""
    import torch
    from transformers import LogitsProcessor

    class ForceLengths(LogitsProcessor):
        def __init__(self):
            self.start = None

        def __call__(self, input_ids, scores):
            self.start = input_ids.shape[1] if self.start is None else self.start
            t = input_ids.shape[1] - self.start  # new tokens so far
            L = torch.tensor(lengths, device=scores.device)[:scores.shape[0]]  # [N]
            scores[t < L - 1, eos_id] = float("-inf")
            at = t == L - 1
            scores[at] = float("-inf")
            scores[at, eos_id] = 0.0
            return scores
    return ForceLengths()


def force_lengths_on_generate(model, lengths, eos_id: int):
    """Every `model.generate` call gets length_processor (a fresh one per call)."""
    from transformers import LogitsProcessorList

    generate = model.generate

    def forced(*args, **kwargs):
        kwargs["logits_processor"] = LogitsProcessorList([length_processor(lengths, eos_id)])
        return generate(*args, **kwargs)
    model.generate = forced


def force_lengths_on_decode(lengths, eos_id: int):
    """The same rule for our sampler: decode.next_tokens sees the logits of the rows still running only, so
    the rows are tracked here as decode.decode drops them (a row leaves when it samples EOS)."""
    import torch

    import decode

    state = {}
    real_next, real_decode = decode.next_tokens, decode.decode

    def next_tokens(logits, temperature, top_p):
        rows, t = state["rows"], state["t"]
        L = torch.tensor(lengths, device=logits.device)[rows]  # [A]
        logits[t < L - 1, eos_id] = float("-inf")
        at = t == L - 1
        logits[at] = float("-inf")
        logits[at, eos_id] = 0.0
        x = real_next(logits, temperature, top_p)
        state["rows"], state["t"] = rows[x != eos_id], t + 1
        return x

    def decode_(model, input_ids, attention_mask, n, *args, **kwargs):
        state.update(rows=torch.arange(input_ids.shape[0] * n, device=input_ids.device), t=0)
        return real_decode(model, input_ids, attention_mask, n, *args, **kwargs)
    decode.next_tokens, decode.decode = next_tokens, decode_
    try:  # the fixed-shape sampler (CUDA) of this tree: every row every step, so row i is row i
        from fast import fixed_decode
    except ImportError:
        return
    real_fixed_next, real_fixed = fixed_decode.next_tokens, fixed_decode.decode_fixed

    def fixed_next(logits, temperature, top_p):
        L, t = torch.tensor(lengths, device=logits.device), state["t"]  # [N]
        logits[t < L - 1, eos_id] = float("-inf")
        logits[t == L - 1] = float("-inf")
        logits[t == L - 1, eos_id] = 0.0
        state["t"] = t + 1
        return real_fixed_next(logits, temperature, top_p)

    def fixed_(*args, **kwargs):
        state["t"] = 0
        return real_fixed(*args, **kwargs)
    fixed_decode.next_tokens, fixed_decode.decode_fixed = fixed_next, fixed_


def fix_lengths(policy, tok, lengths):
    """rollout.sample with every completion's length fixed: lengths None = forced to the whole budget
    (min_new_tokens = max_new_tokens), else the natural list (per row, EOS at the end); no stop pattern.
    Works on this tree (decode.py) and on an earlier one whose sampler is `generate`."""
    import rollout

    sample = rollout.sample
    own_loop = hasattr(rollout, "decode")
    if lengths is not None:
        if own_loop:
            force_lengths_on_decode(lengths, tok.eos_token_id)
        else:
            force_lengths_on_generate(policy, lengths, tok.eos_token_id)

    def fixed(policy, tok, chats, n, max_new_tokens, *rest, **kw):
        kw = {**kw, "stop": None, "min_new_tokens": max_new_tokens if lengths is None else 0}
        return sample(policy, tok, chats, n, max_new_tokens, *rest, **kw)
    rollout.sample = fixed  # train.grpo_step looks it up at call time
