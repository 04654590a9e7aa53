"""Per-token costs of the GPU recipe's model, measured on a CPU (no GPU, no download): the numbers docs/gpu.md's
memory budget multiplies out.

    python bench/token_costs.py            # Qwen2.5-Coder-1.5B's width, bf16, LoRA r=16 on q,k,v,o (~1 min on 2 cores)
    python bench/token_costs.py --small    # the tiny config (a check; CI runs it)

Memory per token: a model of Qwen2.5-Coder-1.5B's width (hidden 1536, 12 / 2 heads, MLP 8960, vocab 151,936,
random weights in bf16) with 1 and with 2 decoder layers; one row of T completion tokens through the loss pass
(chunked.logprobs, the LM head in pieces, or rollout.logprobs, the whole logits), and the bytes of every tensor
autograd keeps for the backward (torch.autograd.graph.saved_tensors_hooks, each storage counted once, the
weights left out):
    per layer and token  = (saved with 2 layers - saved with 1) / T
    head per token       = what the rest of the 1-layer pass keeps / T (the embedding, the final norm, the logits)
KV cache per token = 2 (keys, values) x layers x KV heads x head dim x bytes. The weights are bf16 here, not NF4:
bitsandbytes' 4-bit product keeps the same input for its backward, so the activations are the same (an estimate
until a GPU measures them: bench/gpu_memory.py).

Host syncs and aten ops per token step of the two samplers (decode.py, fast/fixed_decode.py), greedy, 4 rows, on the
tiny config: the ops each step queues (a TorchDispatchMode counts them) and the host reads of the device
(tests/host_syncs.py's list: .item(), .tolist(), truth values, nonzero, boolean indexing).
"""
import argparse
import sys
import time
from pathlib import Path

import torch
from torch.utils._python_dispatch import TorchDispatchMode

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests"))

MiB = 2**20


def config(tok, layers: int, small: bool):
    from transformers import Qwen2Config

    shape = (dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, intermediate_size=128,
                  vocab_size=len(tok)) if small else
             dict(hidden_size=1536, num_attention_heads=12, num_key_value_heads=2, intermediate_size=8960,
                  vocab_size=151936))
    return Qwen2Config(**shape, num_hidden_layers=layers, tie_word_embeddings=True, max_position_embeddings=4096,
                       eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def saved_bytes(policy, r, chunked_head: bool) -> int:
    """Bytes of the tensors autograd keeps for the backward of one loss pass (each storage once)."""
    import rollout
    from fast import chunked

    seen, weights = {}, {p.untyped_storage().data_ptr() for p in policy.parameters()}

    def pack(t):  # the weights themselves are not activations: left out
        ptr = t.untyped_storage().data_ptr()
        if ptr not in weights:
            seen[ptr] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        lp = chunked.logprobs(policy, r, chunk=256) if chunked_head else rollout.logprobs(policy, r)
    lp.sum().backward()
    return sum(seen.values())


def memory_rows(tok, small: bool, T: int) -> list:
    import rollout
    from infra import models

    rows = []
    for chunked_head in (True, False):
        saved = {}
        for layers in (1, 2):
            torch.manual_seed(0)
            from transformers import AutoModelForCausalLM

            base = AutoModelForCausalLM.from_config(config(tok, layers, small), dtype=torch.bfloat16)
            policy = models.add_role_adapters(base, ["coder"])
            ids = torch.randint(0, 1000, (1, T + 1))
            r = rollout.Rollout(ids, torch.ones_like(ids), 1, torch.ones(1, T), torch.zeros(1, dtype=torch.bool), [""])
            saved[layers] = saved_bytes(policy, r, chunked_head)
        what = "LM head in pieces of 256 (fast/chunked.py)" if chunked_head else "whole logits (rollout.logprobs)"
        rows.append((f"per layer and token, {what}", (saved[2] - saved[1]) / T))
        rows.append((f"head per token, {what}", (saved[1] - (saved[2] - saved[1])) / T))
    c = config(tok, 28, small)
    kv = 2 * c.num_hidden_layers * c.num_key_value_heads * (c.hidden_size // c.num_attention_heads) * 2
    rows.append((f"KV cache per token, {c.num_hidden_layers} layers, bf16", kv))
    return rows


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.n = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += 1
        return func(*args, **(kwargs or {}))


def step_rows(tok, steps: int = 16) -> list:
    import decode
    import rollout
    from conftest import tiny_base
    from fast import fixed_decode
    from host_syncs import HostSyncs
    from infra import models

    policy = models.add_role_adapters(tiny_base(tok), ["coder"]).eval()
    chats = [[{"role": "user", "content": "Write a function that adds two numbers."}],
             [{"role": "user", "content": "Hi"}]]
    enc = rollout.encode_prompts(tok, chats, "cpu")
    rows = []
    samplers = (("decode.py", decode.decode, {}), ("fast/fixed_decode.py", fixed_decode.decode_fixed, {"check_every": 8}))
    for name, sampler, kw in samplers:
        counts = {}
        for n_steps in (1, steps + 1):  # the difference: the token steps alone, the prefill taken out
            with HostSyncs() as syncs, Ops() as ops, torch.no_grad():
                sampler(policy, enc.input_ids, enc.attention_mask, 2, n_steps, tok.eos_token_id, 0.0, **kw)
            counts[n_steps] = (syncs.count, ops.n)
        rows.append((f"{name}: host syncs per token step", (counts[steps + 1][0] - counts[1][0]) / steps))
        rows.append((f"{name}: aten ops per token step (2 layers)", (counts[steps + 1][1] - counts[1][1]) / steps))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="the tiny config (hidden 64, vocab 49,152): a check")
    ap.add_argument("--tokens", type=int, default=256, help="completion tokens T of the measured row")
    a = ap.parse_args()
    torch.set_num_threads(min(2, torch.get_num_threads()))
    from infra import models

    t0 = time.perf_counter()
    tok = models.load_tokenizer(str(models.embedded_folder()))
    rows = memory_rows(tok, a.small, a.tokens)
    print(f"{'small config' if a.small else 'Qwen2.5-Coder-1.5B width'}, bf16, T = {a.tokens}; memory in KiB")
    print(f"{'what':62} {'KiB':>9}")
    for name, b in rows:
        print(f"{name:62} {b / 1024:9.1f}")
    print(f"\n{'sampler, tiny config, 4 rows, greedy':62} {'count':>9}")
    for name, v in step_rows(tok):
        print(f"{name:62} {v:9.2f}")
    print(f"({time.perf_counter() - t0:.0f} s)")


if __name__ == "__main__":
    main()
