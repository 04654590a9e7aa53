"""Where a decode step of the sampler goes: ms per step at batch 8, then torch.profiler's table by self CPU time.

    python bench/decode_profile.py          # ms per decode step, ours and `generate` (grpo_bench.decode_ms)
    python bench/decode_profile.py --prof   # and the profile of one rollout of 48 forced tokens

The embedded model with a fresh (zero) Coder adapter, the first training problem, 8 samples at grpo_bench's
temperature (1.0) and top-p (0.95), every row forced to the full length, inside cpu_linear.sampling_weights as rollout.sample runs
it (grpo_bench.our_decode; docs/speed.md, the decode profile).
"""
import argparse
import sys
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
import data  # noqa: E402
import grpo_bench  # noqa: E402
import models  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--prof", action="store_true", help="also print torch.profiler's table of one rollout")
    a = ap.parse_args()
    torch.manual_seed(0)
    base, tok = models.load_base(models.EMBEDDED, "cpu", "none", "auto")
    policy = models.add_role_adapters(base, models.ROLES, grpo_bench.LORA_R, grpo_bench.LORA_ALPHA)
    policy.set_adapter("coder")
    problem = data.load("train")[0]
    for _ in range(2):
        ms = grpo_bench.decode_ms(policy, tok, problem, 16, 80)
        print(f"ms per decode step at batch {grpo_bench.GROUP}: ours {ms['ours']:.1f}, generate {ms['generate']:.1f}",
              flush=True)
    if a.prof:
        from torch.profiler import ProfilerActivity, profile
        run, _ = grpo_bench.our_decode(policy, tok, problem)
        policy.eval()
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            run(48)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))


if __name__ == "__main__":
    main()
