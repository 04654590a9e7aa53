"""What a checkpoint costs: seconds to write one (checkpoint.save: adapters, AdamW state, RNG, fsync,
rename, `latest`) and to load it back (checkpoint.load), and its size, for the embedded model's two
LoRA adapters (r 16 by default) — or any --model.

    python bench/checkpoint_bench.py                    # embedded SmolLM2-135M, CPU, 5 repetitions
    python bench/checkpoint_bench.py --lora-r 64 --reps 3

The AdamW state is made real by one step on random gradients (both moments filled).
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from infra import checkpoint, models


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=models.EMBEDDED)
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    ap.add_argument("--lora-r", type=int, default=16)
    ap.add_argument("--reps", type=int, default=5)
    args = ap.parse_args()
    base, _ = models.load_base(args.model, args.device, "none" if args.device == "cpu" else None)
    policy = models.add_role_adapters(base, models.ROLES, args.lora_r, 2 * args.lora_r)
    lora = [p for n, p in policy.named_parameters() if "lora_" in n]
    opt = torch.optim.AdamW(lora, lr=1e-4)
    for p in lora:
        p.grad = torch.randn_like(p)
    opt.step()
    save_s, load_s = [], []
    with tempfile.TemporaryDirectory() as d:
        for i in range(args.reps):
            t = time.perf_counter()
            ckpt = checkpoint.save(Path(d), f"step-{i:06d}", policy, opt, checkpoint.fresh_state(),
                                   [checkpoint.rng_state()], keep=2)
            save_s.append(time.perf_counter() - t)
            t = time.perf_counter()
            checkpoint.load(ckpt, policy, opt)
            load_s.append(time.perf_counter() - t)
        size = sum(f.stat().st_size for f in ckpt.rglob("*") if f.is_file()) / 2**20
    n = sum(p.numel() for p in lora)
    print(f"{args.model}, LoRA r {args.lora_r}, {n:,} LoRA weights, {args.device}, {args.reps} repetitions")
    print(f"{'':10} {'median s':>9} {'min s':>7} {'max s':>7}")
    for name, xs in (("save", save_s), ("load", load_s)):
        print(f"{name:10} {statistics.median(xs):9.3f} {min(xs):7.3f} {max(xs):7.3f}")
    print(f"checkpoint size {size:.1f} MiB")


if __name__ == "__main__":
    main()
