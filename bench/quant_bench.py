"""CPU/GPU speed and memory of the policy with and without 4-bit NF4 base weights.

Prints one table: load time, sampling throughput (new tokens/s over a batch), and the time of
one forward+backward through the LoRA adapters. Used to choose the CPU default of --quant
(docs/speed.md#quantisation-and-the-compute-dtype-on-cpu). Run: python bench/quant_bench.py [--model NAME] [--device cpu]
"""
import argparse
import resource
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from infra import models


def bench(name, device, quant, batch, new_tokens):
    t0 = time.perf_counter()
    base, tok = models.load_base(name, device, quant)
    policy = models.add_role_adapters(base, ["planner", "coder"])
    load_s = time.perf_counter() - t0
    msgs = [{"role": "user", "content": "Write a Python function that reverses a list."}]
    prompt = tok.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    enc = tok([prompt] * batch, return_tensors="pt").to(device)
    policy.generate(**enc, max_new_tokens=4, do_sample=True)  # warm-up
    t0 = time.perf_counter()
    with torch.no_grad():
        out = policy.generate(**enc, max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=True)
    gen_s = time.perf_counter() - t0
    toks = (out.shape[1] - enc.input_ids.shape[1]) * batch
    t0 = time.perf_counter()
    loss = policy(input_ids=out, labels=out).loss
    loss.backward()
    fb_s = time.perf_counter() - t0
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return load_s, toks / gen_s, fb_s, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=models.EMBEDDED)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--new-tokens", type=int, default=64)
    ap.add_argument("--quant", default="none,4bit")
    a = ap.parse_args()
    print(f"model {a.model}  device {a.device}  batch {a.batch} x {a.new_tokens} new tokens  threads {torch.get_num_threads()}")
    print(f"{'quant':6} {'load s':>7} {'gen tok/s':>10} {'fwd+bwd s':>10} {'peak RSS MiB':>13}")
    for q in a.quant.split(","):  # RSS is a running peak: put the smaller config first
        load_s, tps, fb_s, rss = bench(a.model, a.device, q, a.batch, a.new_tokens)
        print(f"{q:6} {load_s:7.1f} {tps:10.1f} {fb_s:10.2f} {rss:13.0f}")


if __name__ == "__main__":
    main()
