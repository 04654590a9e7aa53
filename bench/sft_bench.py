"""One cold-start SFT step, micro-batched (sft.train today) against the whole batch in one forward (before), on
equal work: the same pairs, the same loss.

    python bench/sft_bench.py                     # Coder, --sft-batch 8, --micro-batch 2, 2 reps x 2 steps
    python bench/sft_bench.py --role planner --reps 1 --steps 1

Each repetition of each system runs in a fresh subprocess (its peak RSS is its own), the systems alternating
so that drifting machine load hits both alike. A worker loads the embedded SmolLM2-135M as training does
(float32, the frozen linears on oneDNN: cpu_linear), draws --sft-batch pairs of the role with a fixed seed
and runs --steps steps (lr 0: every step the same work):
  before  the step of sft.py before micro-batches: one rollout.from_texts of all pairs, padded to the longest
          prompt and target, its log-probs and backward in one pass
  ours    sft.train's step: micro-batches of --micro-batch pairs sorted by length (sft.micro_batches)
Equal work or no ratio: the two systems' losses must agree within 1e-4 (same pairs, same tokens).
Columns: wall s/step (median), CPU s/step of the worker (all threads: what other processes' load does not
inflate as much), peak RSS GiB (VmHWM, model included), tokens per step (prompt + target tokens) and
positions forwarded (padding included), tokens/s, and the step's GFLOP/s against the machine's float32
matmul rate measured in the same worker (a 1024 x 1024 x 1024 oneDNN product, best of 5): the FLOP limit.
FLOPs of a step (our count): forward 2 * (non-embedding weights) per position + 2 * V * d per target
position (the LM head runs on target positions only), backward the same again (dL/dx only: the base is
frozen; LoRA's own products are < 2 % and left out).
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def peak_rss_gib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20
    return float("nan")


def flop_limit_gflops(torch, cpu_linear) -> float:
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    f = (lambda: cpu_linear.onednn_linear(a, b, None)) if cpu_linear.available() else (lambda: a @ b)
    f()
    best = float("inf")
    for _ in range(5):
        t = time.perf_counter()
        f()
        best = min(best, time.perf_counter() - t)
    return 2 * 1024 ** 3 / best / 1e9


def worker(a) -> dict:
    sys.path.insert(0, str(ROOT))
    import random

    import torch

    import cpu_linear
    import data
    import grpo
    import models
    import rollout
    import sft
    import train

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
    rows, gflops = [], flop_limit_gflops(torch, cpu_linear)
    for _ in range(a.steps):
        t, c = time.perf_counter(), time.process_time()
        if a.worker == "before":
            parts = [rollout.from_texts(tok, chats, targets)]
            loss = -(rollout.logprobs(policy, parts[0]) * grpo.loss_weights(parts[0].mask, "token")).sum()
            loss.backward()
            loss = loss.item()
        else:
            parts = sft.micro_batches(tok, chats, targets, a.micro_batch, "cpu")
            n_tokens = sum(r.mask.sum() for r in parts)
            loss = 0.0
            for r in parts:
                part = -(rollout.logprobs(policy, r) * r.mask).sum() / n_tokens
                part.backward()
                loss += part.item()
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        policy.zero_grad(set_to_none=True)
        positions = sum(r.seqs.numel() for r in parts)
        head = sum(r.mask.shape[0] * (r.mask.shape[1] + 1) for r in parts)  # logits_to_keep = T + 1
        flops = 2 * (2 * body * positions + 2 * cfg.vocab_size * cfg.hidden_size * head)
        rows.append({"wall": wall, "cpu": cpu, "loss": loss, **sft.step_tokens(parts), "flops": flops})
    return {"rows": rows, "rss": peak_rss_gib(), "limit_gflops": gflops, "threads": torch.get_num_threads()}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--role", default="coder", choices=["planner", "coder"])
    ap.add_argument("--sft-batch", type=int, default=8)
    ap.add_argument("--micro-batch", type=int, default=2)
    ap.add_argument("--reps", type=int, default=2)
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--systems", default="before,ours")
    ap.add_argument("--worker", choices=["before", "ours"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        print(json.dumps(worker(a)))
        return
    systems = a.systems.split(",")
    res = {s: [] for s in systems}
    for rep in range(a.reps):
        for s in systems:
            cmd = [sys.executable, __file__, "--worker", s, "--role", a.role, "--sft-batch", str(a.sft_batch),
                   "--micro-batch", str(a.micro_batch), "--steps", str(a.steps)]
            out = subprocess.run(cmd, capture_output=True, text=True)
            if out.returncode:
                sys.exit(f"error: worker {s} failed: {out.stderr.strip().splitlines()[-1]}")
            res[s].append(json.loads(out.stdout.strip().splitlines()[-1]))
            print(f"rep {rep + 1} {s}: done", flush=True)
    print(f"\n{a.role} SFT step, --sft-batch {a.sft_batch}, --micro-batch {a.micro_batch}; {a.reps} reps x {a.steps} "
          f"steps; {res[systems[0]][0]['threads']} torch threads")
    print(f"{'system':8} {'wall s':>8} {'CPU s':>8} {'RSS GiB':>8} {'tokens':>7} {'positions':>9} {'tok/s':>7} "
          f"{'GFLOP/s':>8} {'limit':>7} {'of limit':>8}")
    summary = {}
    for s in systems:
        rows = [r for w in res[s] for r in w["rows"]]
        wall, cpu = statistics.median(r["wall"] for r in rows), statistics.median(r["cpu"] for r in rows)
        limit = statistics.median(w["limit_gflops"] for w in res[s])
        g = rows[0]["flops"] / wall / 1e9
        summary[s] = (wall, cpu, rows[0]["loss"])
        print(f"{s:8} {wall:8.2f} {cpu:8.2f} {max(w['rss'] for w in res[s]):8.2f} {rows[0]['tokens']:7d} "
              f"{rows[0]['positions']:9d} {rows[0]['tokens'] / wall:7.0f} {g:8.1f} {limit:7.1f} {100 * g / limit:7.0f}%")
    if "before" in summary and "ours" in summary:
        if abs(summary["before"][2] - summary["ours"][2]) > 1e-4:
            sys.exit(f"error: unequal work (losses {summary['before'][2]:.6f} and {summary['ours'][2]:.6f}): no ratio")
        print(f"ours/before: wall {summary['ours'][0] / summary['before'][0]:.2f}x, "
              f"CPU {summary['ours'][1] / summary['before'][1]:.2f}x (same pairs, losses equal within 1e-4)")


if __name__ == "__main__":
    main()
