"""One cold-start SFT step, micro-batched (sft.train today) against the whole batch in one forward (before), on
equal work: the same pairs, the same loss.

    python bench/sft_bench.py                     # Coder, --sft-batch 8, --micro-batch 2, 2 rounds
    python bench/sft_bench.py --role planner --reps 1 --threads 1
    python bench/sft_bench.py --reps 1 --prof     # then torch.profiler's table of one bf16 step

One process loads the embedded SmolLM2-135M as training does (float32, the frozen linears on oneDNN:
cpu_linear), draws --sft-batch pairs of the role with a fixed seed, and runs one step of each system per
round, alternating, so that drifting machine load hits both alike (no optimizer step: every step the same
work). Each step's peak RSS is its own: freed memory is given back and VmHWM restarted before it.
  before  the step of sft.py before micro-batches: one rollout.from_texts of all pairs, padded to the longest
          prompt and target, its log-probs and backward in one pass
  ours    sft.train's step: micro-batches of --micro-batch pairs sorted by length (sft.micro_batches)
  bf16    ours with the frozen products in bfloat16 (--sft-products bfloat16: cpu_linear.bf16_products; the
          copies made once, outside the timed step, as sft.train makes them once per role)
Equal work or no ratio: the same pairs and tokens, and the losses of before and ours must agree within 1e-4,
bf16's with ours within 1e-2 (its rounding: 2.9e-3 on the Coder's default step, 2026-12-04).
Columns: wall s/step (median), CPU s/step of the worker (all threads: what other processes' load does not
inflate as much), peak RSS GiB (VmHWM, model included), tokens per step (prompt + target tokens) and
positions forwarded (padding included), tokens/s, and the step's GFLOP/s against the machine's float32
matmul rate measured in the same worker (a 1024 x 1024 x 1024 oneDNN product, best of 5): the FLOP limit.
FLOPs of a step (our count): forward 2 * (non-embedding weights) per position + 2 * V * d per target
position (the LM head runs on target positions only), backward the same again (dL/dx only: the base is
frozen; LoRA's own products are < 2 % and left out).
"""
import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def reset_peak_rss() -> None:
    """Free what the last step left (cpu_linear.release_memory), then restart VmHWM from the RSS now (Linux:
    writing 5 to /proc/self/clear_refs)."""
    from fast import cpu_linear

    cpu_linear.release_memory()
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def flop_limit_gflops(torch, cpu_linear, dtype=None) -> float:
    """GFLOP/s of a 1024 x 1024 x 1024 product (oneDNN where it runs), float32 or `dtype`: best of 5."""
    a, b = torch.randn(1024, 1024, dtype=dtype), torch.randn(1024, 1024, dtype=dtype)
    f = (lambda: cpu_linear.onednn_linear(a, b, None)) if cpu_linear.available() else (lambda: a @ b)
    f()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return 2 * 1024 ** 3 / best / 1e9


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", default="coder", choices=["planner", "coder"])
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2, help="rounds of one step of each system, alternating")
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's own)")
    ap.add_argument("--systems", default="before,ours,bf16", help="comma list of before, ours, bf16")
    ap.add_argument("--prof", action="store_true", help="then torch.profiler's table of one step of the last system")
    a = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    import os
    import random

    import torch

    import data
    import grpo
    import rollout
    import sft
    import train
    from fast import cpu_linear
    from infra import models

    if a.threads:
        torch.set_num_threads(a.threads)
    base, tok = models.load_base("SmolLM2-135M-Instruct", "cpu", "none", "float32")
    policy = models.add_role_adapters(base, ["planner", "coder"], 16, 32)
    for n, p in policy.named_parameters():
        if "lora_B" in n:
            torch.nn.init.normal_(p, std=0.02)
    policy.set_adapter(a.role)
    args = train.get_args(["--micro-batch", str(a.micro_batch)])
    random.seed(0)
    chats, targets = map(list, zip(*random.sample(sft.pairs(data.load("train"), a.role, args.roles), a.sft_batch)))
    cfg = policy.config
    body = sum(p.numel() for n, p in base.named_parameters() if "layers." in n and "lora_" not in n)

    def step(system):
        if system == "before":
            parts = [rollout.from_texts(tok, chats, targets)]
            loss = -(rollout.logprobs(policy, parts[0]) * grpo.loss_weights(parts[0].mask, "token")).sum()
            loss.backward()
            return parts, loss.item()
        parts = sft.micro_batches(tok, chats, targets, a.micro_batch, "cpu")
        n_tokens = sum(r.mask.sum() for r in parts)
        loss = 0.0
        for r in parts:
            part = -(rollout.logprobs(policy, r) * r.mask).sum() / n_tokens
            part.backward()
            loss += part.item()
        return parts, loss

    systems = a.systems.split(",")
    res = {s: [] for s in systems}
    limits = []
    uptime = os.getloadavg()[0]
    for rep in range(a.reps):
        for s in systems:
            limits.append(flop_limit_gflops(torch, cpu_linear))
            reset_peak_rss()
            with cpu_linear.bf16_products(policy, on=s == "bf16"):  # the bf16 copies are made before the clock starts
                t, c = time.perf_counter(), time.process_time()
                parts, loss = step(s)
                wall, cpu = time.perf_counter() - t, time.process_time() - c
            policy.zero_grad(set_to_none=True)
            positions = sum(r.seqs.numel() for r in parts)
            head = sum(r.mask.shape[0] * (r.mask.shape[1] + 1) for r in parts)  # logits_to_keep = T + 1
            flops = 2 * (2 * body * positions + 2 * cfg.vocab_size * cfg.hidden_size * head)
            res[s].append({"wall": wall, "cpu": cpu, "loss": loss, **sft.step_tokens(parts), "flops": flops,
                           "rss": peak_rss_gib()})
            print(f"rep {rep + 1} {s}: {wall:.1f} s wall, {cpu:.1f} s CPU", flush=True)
    limit = statistics.median(limits)
    bf16_limit = flop_limit_gflops(torch, cpu_linear, torch.bfloat16) if "bf16" in systems else None
    print(f"\n{a.role} SFT step, --sft-batch {a.sft_batch}, --micro-batch {a.micro_batch}; {a.reps} rounds, the systems "
          f"alternating in one process; {torch.get_num_threads()} torch threads; load average {uptime:.1f} at the start, "
          f"{os.getloadavg()[0]:.1f} at the end")
    print(f"{'system':8} {'wall s':>8} {'CPU s':>8} {'RSS GiB':>8} {'tokens':>7} {'positions':>9} {'tok/s':>7} "
          f"{'GFLOP/s':>8} {'of limit':>8}")
    summary = {}
    for s in systems:
        rows = res[s]
        wall, cpu = statistics.median(r["wall"] for r in rows), statistics.median(r["cpu"] for r in rows)
        g = rows[0]["flops"] / wall / 1e9
        summary[s] = (wall, cpu, rows[0]["loss"])
        print(f"{s:8} {wall:8.2f} {cpu:8.2f} {max(r['rss'] for r in rows):8.2f} {rows[0]['tokens']:7d} "
              f"{rows[0]['positions']:9d} {rows[0]['tokens'] / wall:7.0f} {g:8.1f} {100 * g / limit:7.0f}%")
    print(f"FLOP limit: {limit:.1f} GFLOP/s (float32 1024^3 oneDNN product, median over the rounds); "
          f"{rows[0]['flops'] / 1e9:.0f} GFLOP per step by our count"
          + (f"; bf16 products: {bf16_limit:.1f} GFLOP/s (the same product in bfloat16, after the rounds)" if bf16_limit else ""))
    for s, tol in (("ours", 1e-4), ("bf16", 1e-2)):
        if s not in summary or "before" not in summary:
            continue
        ref = summary["ours" if s == "bf16" and "ours" in summary else "before"][2]
        if abs(ref - summary[s][2]) > tol:
            sys.exit(f"error: unequal work ({s}'s loss {summary[s][2]:.6f} against {ref:.6f}): no ratio")
        print(f"{s}/before: wall {summary[s][0] / summary['before'][0]:.2f}x, CPU {summary[s][1] / summary['before'][1]:.2f}x "
              f"(same pairs; loss {summary[s][2]:.6f}, within {tol:g} of {ref:.6f})")
    if a.prof:  # where one step of the last system goes, by operator (self CPU time: each op's own, no children)
        from torch.profiler import ProfilerActivity, profile
        with cpu_linear.bf16_products(policy, on=systems[-1] == "bf16"), profile(activities=[ProfilerActivity.CPU]) as prof:
            step(systems[-1])
        policy.zero_grad(set_to_none=True)
        print(f"\n{systems[-1]}, one step in torch.profiler:")
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15, max_name_column_width=50))


if __name__ == "__main__":
    main()
