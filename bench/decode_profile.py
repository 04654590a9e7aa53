"""Where a decode step of the sampler goes: ms per step at batch 8 against the bandwidth limit, then torch.profiler's table.

    python bench/decode_profile.py                 # ms per decode step: fused and unfused sampling, `generate`
    python bench/decode_profile.py --reps 5 --prof # five interleaved rounds, then the profile of one rollout

The embedded model with a fresh (zero) Coder adapter, the first training problem, 8 samples at grpo_bench's
temperature (1.0) and top-p (0.95), every row forced to the full length (the same tokens of work for every
system), inside cpu_linear.sampling_weights as rollout.sample runs it (grpo_bench.our_decode). Systems, each
timed by grpo_bench.decode_ms ((t(80) - t(16)) / 64: prefill excluded), in interleaved rounds so a change in
the machine's load falls on all of them alike:
    fused     sampling_weights as it is: q|k|v and gate|up one product each, F.rms_norm (cpu_linear.SIBLINGS,
              RMS_NORMS)
    top-64    fused, with the nucleus looked for among the 64 most likely tokens, then all V (the sampler before
              decode.NUCLEUS_TRIES had the 1024 between them: the full sort and draw over V cost 25 ms)
    unfused   the same as fused with both fusions switched off (one product per layer, transformers' own norm)
    generate  transformers' `generate` on the unmerged policy (its `decode_ms` entry of the first system)
    products  the fused step's products alone: every packed weight of sampling_weights (the same groups,
              cpu_linear.packed_groups) times an input of 8 rows, one after the other, 64 passes: what the
              step would cost if it were its products only (no attention, norms, sampling or Python)
The limit is the weights' bytes over the machine's read bandwidth (grpo_bench.read_bandwidth_gbs, best of
five sums over 1 GiB, read after each round: the median of the rounds; it moved from 29.6 to 60.1 GB/s between
runs of one afternoon): the time a step needs if it only read every weight once (docs/speed.md, the decode
profile). Beside it the FLOP limit, the other side of the roofline: the step's products, 2 x 8 rows x every
linear weight's elements (LoRA merged: the base's shapes; attention on the cache left out, ~1 % of them for
SmolLM2-135M), over the machine's float32 product rate (sft_bench.flop_limit_gflops, a 1024^3 product, also
the median of the rounds). A step can be no faster than the larger of the two.
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path[:0] = [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]
import data  # noqa: E402
import decode  # noqa: E402
import grpo_bench  # noqa: E402
import sft_bench  # noqa: E402
from fast import cpu_linear
from infra import models

SYSTEMS = {"fused": (cpu_linear.SIBLINGS, cpu_linear.RMS_NORMS, decode.NUCLEUS_TRIES),
           "top-64": (cpu_linear.SIBLINGS, cpu_linear.RMS_NORMS, (64,)), "unfused": ((), set(), decode.NUCLEUS_TRIES)}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=2, help="interleaved rounds of every system")
    ap.add_argument("--prof", action="store_true", help="also print torch.profiler's table of one fused rollout")
    a = ap.parse_args()
    torch.manual_seed(0)
    base, tok = models.load_base(models.EMBEDDED, "cpu", "none", "auto")
    weights = sum(p.numel() * p.element_size() for p in base.parameters())  # tied embeddings counted once
    flops = 2 * grpo_bench.GROUP * sum(m.weight.numel() for m in base.modules() if isinstance(m, torch.nn.Linear))
    policy = models.add_role_adapters(base, models.ROLES, grpo_bench.LORA_R, grpo_bench.LORA_ALPHA)
    policy.set_adapter("coder")
    problem = data.load("train")[0]
    ms, bws, rates = {name: [] for name in [*SYSTEMS, "generate", "products"]}, [], []
    for rep in range(a.reps):
        for name, (siblings, norms, tries) in SYSTEMS.items():
            cpu_linear.SIBLINGS, cpu_linear.RMS_NORMS, decode.NUCLEUS_TRIES = siblings, norms, tries
            out = grpo_bench.decode_ms(policy, tok, problem, 16, 80)
            ms[name].append(out["ours"])
            if name == "fused":
                ms["generate"].append(out["generate"])
            print(f"round {rep + 1} {name}: {out['ours']:.1f} ms per step", flush=True)
        ms["products"].append(products_ms(policy, grpo_bench.GROUP, 64))
        bws.append(grpo_bench.read_bandwidth_gbs())  # it moves on this kind of machine: read once a round
        rates.append(sft_bench.flop_limit_gflops(torch, cpu_linear))
    cpu_linear.SIBLINGS, cpu_linear.RMS_NORMS, decode.NUCLEUS_TRIES = SYSTEMS["fused"]
    bw, rate = statistics.median(bws), statistics.median(rates)
    limit, flop_limit = 1000 * weights / (bw * 1e9), 1000 * flops / (rate * 1e9)
    print(f"\ndecode at batch {grpo_bench.GROUP}, 64 forced tokens a row; limit {limit:.1f} ms = {weights / 1e6:.0f} MB "
          f"of weights / {bw:.1f} GB/s read bandwidth (median of the rounds' {', '.join(f'{b:.1f}' for b in bws)}); "
          f"FLOP limit {flop_limit:.1f} ms = {flops / 1e9:.2f} GFLOP of products / {rate:.1f} GFLOP/s (median of "
          f"{', '.join(f'{r:.1f}' for r in rates)})\n\n| system | ms per step, median (min-max) | x limit | x FLOP limit |\n|---|---|---|---|")
    for name, v in ms.items():
        med = statistics.median(v)
        print(f"| {name} | {med:.1f} ({min(v):.1f}-{max(v):.1f}) | {med / limit:.1f} | {med / flop_limit:.1f} |")
    f, u, t = (statistics.median(ms[s]) for s in ("fused", "unfused", "top-64"))
    print(f"\nfused/unfused {f / u:.2f}x, fused/top-64 {f / t:.2f}x")
    if a.prof:
        from torch.profiler import ProfilerActivity, profile
        run, _ = grpo_bench.our_decode(policy, tok, problem)
        policy.eval()
        with torch.no_grad(), profile(activities=[ProfilerActivity.CPU]) as prof:
            run(48)
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=30))


def products_ms(policy, rows: int, passes: int) -> float:
    """ms per pass over the products of a fused decode step: each packed weight as sampling_weights builds it
    (cpu_linear.packed_groups: LoRA merged, stacked, packed for `rows` rows) times a random input [rows, in]."""
    lora, routed = cpu_linear.sampling_layers(policy)
    with torch.no_grad():
        packed = [w for _, w, _, _ in cpu_linear.packed_groups(policy, lora + routed, rows)]
        xs = [torch.randn(rows, w.shape[1]) for w in packed]
        for x, w in zip(xs, packed):  # warm-up: oneDNN makes its kernels on the first call
            cpu_linear.onednn_linear(x, w, None)
        t = time.perf_counter()
        for _ in range(passes):
            for x, w in zip(xs, packed):
                cpu_linear.onednn_linear(x, w, None)
    return 1000 * (time.perf_counter() - t) / passes


if __name__ == "__main__":
    main()
