"""The GPU path's sampler and numerics on a random model of Qwen2.5-Coder-1.5B's shape (no weights needed).

    python bench/gpu_numerics.py sampler                    # CUDA: the CUDA-graph sampler against the eager one
    python bench/gpu_numerics.py numerics                   # the sampler's log-probs against the loss pass's, ...
    python bench/gpu_numerics.py numerics --gradient-checkpointing   # ... with the loss pass of that flag
    python bench/gpu_numerics.py sampler --device cpu --small        # the CPU check of the script (a tiny shape)

The model is bench/gpu_memory.py's (random weights, saved and loaded back through models.load_base as train.py
loads one: CUDA NF4 + bf16 compute; --quant 4bit by default on a CPU too, bitsandbytes' CPU path), both roles'
adapters with B random (std 0.02, seed 0) so that they change the policy.

sampler   greedy fixed_decode.decode_fixed of B = 4 prompts x n = 2 rows, once eager and once with its token step
          captured as a CUDA graph (train.py --cuda-graph): the tokens must be identical. Each is timed after a
          warm-up call: ms per token step = wall time / steps (CUDA synchronised). On a CPU, where there is no CUDA
          graph, decode.decode (the CPU's sampler) against the eager fixed_decode.
numerics  rows sampled at temperature 1 by rollout.sample: the sampler's log-probs (Rollout.logp, from the KV-cache
          steps) against the loss pass's (update.scorer, the forward train.py's loss runs, in train mode) on the same
          tokens: max and mean |difference| in nats over the completion tokens. Then for each role, with its adapter
          active, the backward of -sum(log-probs): its own LoRA gradients non-zero, the other role's untouched. The
          tied LM head must share its storage with the input embedding (one tensor, not a copy).

The last line starts with "CHECK " (bench/gpu_check.sh's table); exit status 1 when a check fails.
"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

PROMPTS = ["Write a function add(a, b) that returns a + b.", "Reverse a string s.",
           "Return the largest element of a list xs.", "Count the vowels in a string s."]


def build(a, train_flags):
    """(policy with both adapters, tokenizer, train.py's args) on a random model (module docstring)."""
    import train
    from gpu_memory import qwen_config, save_random_model  # bench/ is on sys.path: this file's folder
    from infra import models

    args = train.get_args(train_flags + ["--device", a.device])
    tok = models.load_tokenizer(str(models.embedded_folder()))
    cuda = a.device == "cuda"
    with tempfile.TemporaryDirectory() as folder:
        save_random_model(qwen_config(tok, a.small), tok, folder, a.device, torch.bfloat16 if cuda else torch.float32)
        base, tok = models.load_base(folder, a.device, a.quant)
    torch.manual_seed(0)
    policy = models.add_role_adapters(base, models.ROLES, args.lora_r, args.lora_alpha,
                                      gradient_checkpointing=args.gradient_checkpointing)
    for n, p in policy.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)
    policy.set_adapter("coder")
    return policy, tok, args


def chats():
    return [[{"role": "user", "content": p}] for p in PROMPTS]


def timed(fn, device: str) -> tuple:
    """(fn's result, wall seconds) after one warm-up call; CUDA synchronised around the timed call."""
    fn()
    if device == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    out = fn()
    if device == "cuda":
        torch.cuda.synchronize()
    return out, time.perf_counter() - t


def check_sampler(policy, tok, a) -> tuple[bool, str]:
    """Greedy tokens of the two samplers (module docstring): (identical, the CHECK line's text)."""
    import decode
    import rollout
    from fast import fixed_decode

    enc = rollout.encode_prompts(tok, chats(), a.device)
    ids, attn = enc.input_ids, enc.attention_mask
    ends = rollout.end_ids(tok, policy)
    policy.eval()

    def run(sampler, **k):
        with torch.no_grad():
            return lambda: sampler(policy, ids, attn, 2, a.new_tokens, ends, 0.0, 1.0, **k)[0]
    if a.device == "cuda":
        names = ("eager", "CUDA graph")
        (x, tx), (y, ty) = timed(run(fixed_decode.decode_fixed), "cuda"), timed(run(fixed_decode.decode_fixed, graph=True), "cuda")
    else:
        names = ("decode.py", "fixed_decode eager")
        (x, tx), (y, ty) = timed(run(decode.decode), "cpu"), timed(run(fixed_decode.decode_fixed), "cpu")
    same = x.shape == y.shape and torch.equal(x, y)
    ms_x, ms_y = 1e3 * tx / max(1, x.shape[1]), 1e3 * ty / max(1, y.shape[1])  # ms per token step
    print(f"greedy, {ids.shape[0]} prompts x 2 rows, {x.shape[1]} token steps: {names[0]} {ms_x:.2f} ms "
          f"a step, {names[1]} {ms_y:.2f} ms a step")
    return same, (f"tokens {'identical' if same else 'DIFFER'}; {names[0]} {ms_x:.2f} ms/step, "
                  f"{names[1]} {ms_y:.2f} ms/step ({tx / max(ty, 1e-9):.2f}x)")


def check_numerics(policy, tok, args, a) -> tuple[bool, str]:
    """Log-probs of the sampler against the loss pass, each role's gradients, the tied head (module docstring)."""
    import rollout
    import update

    torch.manual_seed(0)
    r = rollout.sample(policy, tok, chats(), 2, a.new_tokens, temperature=1.0)
    policy.train()  # the loss pass runs in train mode (train.py): gradient checkpointing recomputes only then
    m = r.mask.bool()
    worst, ok, grads = 0.0, True, []
    for role in ("planner", "coder"):
        policy.set_adapter(role)
        policy.zero_grad(set_to_none=True)
        forward = update.scorer(policy, r, args)
        total = 0.0
        diffs = []
        for idx in forward.micro_batches(range(r.seqs.shape[0])):
            logp = forward.logprobs(idx)  # [n, T] with grad
            loss = -(logp * r.mask[idx]).sum()
            loss.backward()
            total += loss.item()
            diffs.append((logp.detach() - r.logp[idx]).abs()[m[idx]])
        d = torch.cat(diffs).float()
        own = [p.grad for n, p in policy.named_parameters() if "lora_" in n and f".{role}." in n]
        other = [p.grad for n, p in policy.named_parameters() if "lora_" in n and f".{role}." not in n]
        own_nonzero = any(g is not None and g.abs().sum() > 0 for g in own)
        other_zero = all(g is None or g.abs().sum() == 0 for g in other)
        finite = all(g is None or torch.isfinite(g).all() for g in own) and torch.isfinite(d).all()
        ok &= bool(own_nonzero and other_zero and finite)
        grads.append(f"{role} {'ok' if own_nonzero and other_zero and finite else 'WRONG'}")
        if role == "coder":  # the Coder's adapter sampled r: its log-probs are the ones to compare
            worst, mean = d.max().item(), d.mean().item()
            print(f"{int(m.sum())} completion tokens: |sampler - loss pass| max {worst:.2e} mean {mean:.2e} nats")
        print(f"{role}: loss {total:.3f}, own LoRA gradients non-zero {own_nonzero}, the other role's zero {other_zero}")
    head, emb = policy.get_output_embeddings().weight, policy.get_input_embeddings().weight
    tied = head.data_ptr() == emb.data_ptr()
    ok &= tied and worst < a.tolerance
    path = "row by row (gradient checkpointing)" if args.gradient_checkpointing else "shared prompt"
    return ok, (f"logp |sampler - loss| max {worst:.2e} nats (< {a.tolerance}), loss pass {path}; grads "
                + ", ".join(grads) + f"; tied head {'shared' if tied else 'COPIED'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="other flags go to train.get_args")
    ap.add_argument("what", choices=["sampler", "numerics"])
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="tiny config (hidden 64, 2 layers) for a CPU check")
    ap.add_argument("--quant", default="4bit", choices=["4bit", "none"])
    ap.add_argument("--new-tokens", type=int, default=64, help="token steps sampled (default 64)")
    ap.add_argument("--tolerance", type=float, default=0.5,
                    help="the largest |sampler - loss pass| log-prob in nats that passes (default 0.5: bf16 compute, "
                         "a KV-cache step against a whole-sequence forward)")
    a, train_flags = ap.parse_known_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA GPU (on CPU: --device cpu --small)")
    from infra import models

    try:
        policy, tok, args = build(a, train_flags)
    except models.ModelError as e:
        sys.exit(f"error: {e}")
    ok, line = check_sampler(policy, tok, a) if a.what == "sampler" else check_numerics(policy, tok, args, a)
    print("CHECK " + line)
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
