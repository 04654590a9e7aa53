"""Peak memory of one two-role GRPO step with a Qwen2.5-Coder-1.5B-shaped policy (4-bit NF4 base).

    python bench/gpu_memory.py                                # CUDA: the 1.5B shape, NF4, bf16 compute
    python bench/gpu_memory.py --device cpu --small           # a check on CPU: tiny config, float32
    python bench/gpu_memory.py --num-plans 8 --max-code-tokens 256   # any train.py flag sets the step
    python bench/gpu_memory.py $(cat bench/gpu_recipe.flags)         # the step of docs/gpu.md's recipe

Checks the claim (docs/gpu.md) that training fits a consumer GPU, without a download: the model has
Qwen2.5-Coder-1.5B's shape (hidden 1536, 28 layers, 12 query / 2 KV heads, MLP 8960, vocab
151936, tied embeddings, rope theta 1e6) and random weights; memory does not depend on the values.
It is built with random weights (bf16 on CUDA, float32 on CPU), saved to a temp folder and loaded
back through models.load_base exactly as train.py loads a model (CUDA: NF4 double-quant, bf16
compute), both LoRA adapters added, AdamW on their weights; then one train.grpo_step at train.py's
default shape (2 problems x 2 plans x 4 codes, 48 plan / 128 code tokens; other train.py flags
change it), every completion forced to its full length (the worst case). The embedded SmolLM2
tokenizer stands in for Qwen's: its ids fit the vocab, and sampled ids beyond it decode to
nothing, so programs are nonsense; no tensor changes size.

Random weights write no passing program, so every reward would be 0, every advantage 0, and (beta 0)
no row would reach the loss pass: the check would measure the rollout alone. So the sandbox is replaced
by `spread_results`: code j of plan i passes iff j <= i mod (M - 1), a spread inside every plan's codes
AND between the plans of a problem (M >= 3, G >= 2), so every role's rows enter the loss pass; the
check counts each role's loss-pass micro-batches and fails when one has none.

Printed: the loss pass's micro-batches per role; then, in GiB (2^30 bytes): the weights' own size
(model.get_memory_footprint()), then CUDA: torch.cuda.max_memory_allocated while loading and
memory_allocated after it and after adding the adapters; max_memory_allocated during the step (tensors),
during the gradient step alone (the loss pass), and max_memory_reserved (what the caching allocator held,
closer to what nvidia-smi shows).
CPU: the process's VmRSS after load and VmHWM (peak RSS) after the step, both including
Python, torch and the libraries (about 0.4 GiB). Then the seconds of each phase of the step (on CUDA host times
unless --profile is given: progress.Clock) and a last line, "CHECK ...", the summary bench/gpu_check.sh shows.
"""
import argparse
import math
import sys
import tempfile
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

GiB = 2**30


def qwen_config(tok, small: bool):
    """Qwen2.5-Coder-1.5B's shape (its config.json), or a tiny one (hidden 64, 2 layers) for CPU checks."""
    from transformers import Qwen2Config

    shape = (dict(hidden_size=64, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
                  intermediate_size=128, vocab_size=len(tok)) if small else
             dict(hidden_size=1536, num_hidden_layers=28, num_attention_heads=12, num_key_value_heads=2,
                  intermediate_size=8960, vocab_size=151936))
    return Qwen2Config(**shape, tie_word_embeddings=True, max_position_embeddings=32768, rms_norm_eps=1e-6,
                       rope_parameters={"rope_type": "default", "rope_theta": 1e6},
                       bos_token_id=tok.bos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)


def save_random_model(config, tok, folder, device="cpu", dtype=torch.bfloat16):
    """A randomly initialised causal LM of `config`, written with `tok` as a normal HF folder."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    with torch.device(device):  # on CUDA the random init runs on the GPU (seconds, not minutes)
        model = AutoModelForCausalLM.from_config(config, dtype=dtype)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


def rss_gib(field: str) -> float:
    """VmRSS (now) or VmHWM (peak) of this process, GiB."""
    line = next(x for x in Path("/proc/self/status").read_text().splitlines() if x.startswith(field + ":"))
    return int(line.split()[1]) * 1024 / GiB  # kB


def spread_results(args, clock, jobs: list) -> list:
    """train.run_programs without the sandbox: code j of plan i (flat index k = i * M + j, i counted over
    all problems) passes every test iff j <= i mod (M - 1), else fails them all (module docstring)."""
    import sandbox

    M = args.codes_per_plan
    ok = [k % M <= (k // M) % max(1, M - 1) for k in range(len(jobs))]
    return [sandbox.Result("passed" if p else "failed", int(p), 1, 0.0, 0.0, 0.0) for p in ok]


def count_micro_batches(update, counts: dict) -> None:
    """Wrap update.scorer so that every micro-batch of the loss pass adds 1 to counts[active adapter]."""
    scorer = update.scorer

    def counted(policy, *a, **k):
        forward = scorer(policy, *a, **k)
        batches, role = forward.micro_batches, policy.active_adapter

        def micro_batches(rows):
            for ids in batches(rows):
                counts[role] = counts.get(role, 0) + 1
                yield ids
        forward.micro_batches = micro_batches
        return forward
    update.scorer = counted


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0], epilog="other flags go to train.get_args")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--small", action="store_true", help="tiny config (hidden 64, 2 layers) for a CPU check")
    ap.add_argument("--quant", default="auto", choices=["auto", "4bit", "none"], help="auto: 4bit on CUDA, none on CPU")
    a, train_flags = ap.parse_known_args()
    if a.device == "cuda" and not torch.cuda.is_available():
        sys.exit("error: --device cuda but torch sees no CUDA GPU (on CPU: --device cpu --small)")
    import data  # after the device check, so that it fails within a second
    import train
    from forced_lengths import fix_lengths  # bench/ is on sys.path: this file's folder
    from infra import models

    args = train.get_args(train_flags + ["--device", a.device])
    from fast import fixed_decode
    fixed_decode.GRAPH = args.cuda_graph  # --cuda-graph, as TrainingRun.setup honours it (CUDA only)
    quant = models.default_quant(a.device) if a.quant == "auto" else a.quant
    cuda = a.device == "cuda"
    tok = models.load_tokenizer(str(models.embedded_folder()))
    config = qwen_config(tok, a.small)

    with tempfile.TemporaryDirectory() as folder:
        save_random_model(config, tok, folder, a.device, torch.bfloat16 if cuda else torch.float32)
        if cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats()
        try:
            base, tok = models.load_base(folder, a.device, quant)
        except models.ModelError as e:
            sys.exit(f"error: {e}")
    rows = [("weights (get_memory_footprint)", base.get_memory_footprint() / GiB)]
    if cuda:
        rows += [("peak during load, allocated", torch.cuda.max_memory_allocated() / GiB),
                 ("after load, allocated", torch.cuda.memory_allocated() / GiB)]
    else:
        rows.append(("after load, RSS", rss_gib("VmRSS")))
    policy = models.add_role_adapters(base, models.ROLES, args.lora_r, args.lora_alpha,
                                      gradient_checkpointing=args.gradient_checkpointing)
    optimizer = torch.optim.AdamW([p for n, p in policy.named_parameters() if "lora_" in n], lr=args.lr)
    if cuda:
        rows.append(("+ adapters, allocated", torch.cuda.memory_allocated() / GiB))
        torch.cuda.reset_peak_memory_stats()

    import update

    fix_lengths(policy, tok, None)  # every completion the whole budget: the memory of the longest step
    train.run_programs = spread_results  # rewards with a spread: every role's rows reach the loss pass
    counts, step_peak, loss_peak = {}, [], []
    count_micro_batches(update, counts)
    gradient_step = update.gradient_step

    def measured_gradient_step(*a, **k):  # the peak before it (the rollouts), then the loss pass's own (CUDA)
        if cuda:
            step_peak.append(torch.cuda.max_memory_allocated())
            torch.cuda.reset_peak_memory_stats()
        out = gradient_step(*a, **k)
        if cuda:
            loss_peak.append(torch.cuda.max_memory_allocated())
        return out
    update.gradient_step = measured_gradient_step  # train.grpo_step looks it up at call time
    problems = data.load(args.train_data)[:args.problems_per_step]
    m, _ = train.grpo_step(policy, tok, problems, args, optimizer)
    if cuda:
        rows += [("peak during step, allocated", max(step_peak + loss_peak) / GiB),
                 ("peak during loss pass, allocated", loss_peak[0] / GiB),
                 ("peak during step, reserved", torch.cuda.max_memory_reserved() / GiB)]
    else:
        rows.append(("peak during step, peak RSS", rss_gib("VmHWM")))

    shape = "small (hidden 64, 2 layers)" if a.small else "Qwen2.5-Coder-1.5B"
    plans = f"tokens per plan {m['plan_tokens']:.0f}, " if m["plan_tokens"] is not None else ""
    print(f"{shape}, {a.device}, quant {quant}; one step: {len(problems)} problems x {args.num_plans} plans "
          f"x {args.codes_per_plan} codes; {plans}per code {m['code_tokens']:.0f}; {m['time_step_s']:.1f} s")
    print("loss-pass micro-batches: " + ", ".join(f"{role} {counts.get(role, 0)}" for role in args.roles))
    print(f"loss {m['loss']:.6f}, gradient norm {m['grad_norm']:.6f}, skipped updates {m['skipped_updates']}")
    print("seconds per phase: " + ", ".join(f"{k[5:-2]} {v:.2f}" for k, v in m.items()
                                            if k.startswith("time_") and k != "time_step_s"))
    missing = [role for role in args.roles if not counts.get(role)]
    print(f"{'memory':32} {'GiB':>7}")
    for name, gib in rows:
        print(f"{name:32} {gib:7.3f}")
    peaks = dict(rows)
    peak = (f"peak {peaks['peak during step, allocated']:.2f} GiB allocated, "
            f"{peaks['peak during step, reserved']:.2f} reserved" if cuda else
            f"peak RSS {peaks['peak during step, peak RSS']:.2f} GiB")
    print(f"CHECK {peak}; {m['time_step_s']:.1f} s; loss {m['loss']:.4g}, grad norm {m['grad_norm']:.4g}, "
          f"skipped {m['skipped_updates']}")
    if missing:
        sys.exit(f"error: the loss pass ran no micro-batch of {', '.join(missing)}: "
                 "the peak is not the training step's")
    if m["skipped_updates"] or not (math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"]) and m["grad_norm"] > 0):
        sys.exit(f"error: the step did not train (loss {m['loss']}, gradient norm {m['grad_norm']}, "
                 f"{m['skipped_updates']} skipped updates): its memory is not a training step's")


if __name__ == "__main__":
    main()
