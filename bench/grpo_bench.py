"""Wall time and memory of one GRPO step, ours (train.grpo_step) against TRL's GRPOTrainer, on equal work.

    python bench/grpo_bench.py --trl-python /tmp/trlvenv/bin/python            # ours, TRL, ours2role
    python bench/grpo_bench.py --before /tmp/main --trl-python ...            # + our code at another checkout
    python bench/grpo_bench.py --quick --systems ours                         # smoke test: 8 tokens, 1 step

TRL lives in its own environment; no product file imports it:
    python -m venv --system-site-packages /tmp/trlvenv && /tmp/trlvenv/bin/pip install -r bench/requirements.txt

The same work for every system: the embedded SmolLM2-135M-Instruct, CPU (--device cuda: the GPU, the weights
unquantised for all), one dtype (--dtype, float32 by
default), LoRA r=16 alpha=32 on q,k,v,o; one problem (data.load("train")[0]) x 8 completions; temperature
1.0, top_p 0.95; KL beta 0.04 to the base model (adapters off); one AdamW step, lr 2e-4; reward = pass rate
of our sandbox (sandbox.run_many, same workers and timeout). Two length settings (--lengths):
  forced   every completion exactly --code-tokens tokens (EOS forbidden before; no stop pattern)
  natural  completion i ends with EOS after NATURAL[i] tokens (EOS forbidden before, forced there): the
           lengths of 8 completions the model sampled for that problem, so that the systems do the same
           work while completions end at different times, as in training
Systems:
  ours       single-role mode: train.grpo_step with --roles coder, 1 problem x 8 codes
  before     the same through the train.py of another checkout (--before PATH, e.g. a worktree of main)
  trl        GRPOTrainer(num_generations=8, per_device_train_batch_size=8): one step = 1 prompt x 8
             completions. TRL's own defaults otherwise (e.g. gradient checkpointing on, as shipped)
  ours2role  what collaboration costs: 2 plans (--plan-tokens each) x 4 codes per plan (forced only; no
             ratio: it is more work by design)
Each repetition runs in a fresh subprocess (`--worker NAME`, prints one JSON line), the systems alternating
so that drifting machine load hits all alike. A worker runs --warmup uncounted steps, then --steps counted.

Equal work or no ratio: per length setting, every compared system's generated tokens per step (counted from
its completion masks) must be within 1 % of the others', and every system must report the same dtype for
its weights; otherwise the table is printed without ratios and the bench exits with status 1.

Columns: step wall time (median, min-max over all counted steps of all repetitions); peak memory in GiB (on a
CPU the worker's VmHWM, sandbox children not included; on CUDA torch.cuda.max_memory_allocated, the GPU's tensors:
the host's RSS says nothing there; max over repetitions); generated tokens per step; tokens per
second of step wall time; CPU seconds of the worker process per step (all its threads; sandbox children not
included): on a loaded machine the cost that other processes do not inflate. Then the ratios ours/TRL and ours/before, and the seconds per phase of our rows.
Decode at batch 8: ms per decode step (one new token for each of 8 rows, prefill excluded: the difference
of two lengths), our loop (decode.decode) and `generate` (what TRL and the earlier code use), against the
memory-bandwidth limit: the weights' bytes over this machine's read bandwidth, measured here (a step
cannot be faster than reading every weight once).

Goals (issue: side by side in one run, same work): a step <= 0.5x TRL's wall time and <= 0.5x its peak RSS,
forced and natural; decode within 3x of the bandwidth limit.
"""
import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(Path(__file__).resolve().parent))  # this folder: forced_lengths
from forced_lengths import fix_lengths  # noqa: E402

GROUP = 8  # completions per problem and step, every system
LORA_R, LORA_ALPHA, BETA, LR, TEMPERATURE, TOP_P, SANDBOX_TIMEOUT_S = 16, 32, 0.04, 2e-4, 1.0, 0.95, 4.0
# Natural lengths (tokens, EOS included) of 8 completions of the embedded model for data.load("train")[0],
# direct Coder prompt, temperature 1.0, top-p 0.95, our stop at the closed fence, budget 128 (rollout.sample,
# seed 0, 2026-12-02); the row ends with EOS there in every system.
NATURAL = [50, 29, 36, 36, 34, 53, 26, 110]
COMPARED = ("ours", "before", "trl")  # one work per length setting; ours2role is more work by design


def quick_lengths(lengths, budget: int) -> list:
    """NATURAL scaled to a smaller budget (--quick): at least 2 tokens, at most `budget`."""
    return [max(2, min(budget, round(n * budget / 128))) for n in lengths]


def peak_memory_gib(device: str = "cpu") -> float:
    """The peak memory of this process's work in GiB: on CUDA the GPU tensors' (torch.cuda.max_memory_allocated),
    else this process's peak resident set size (VmHWM)."""
    if device == "cuda":
        import torch

        return torch.cuda.max_memory_allocated() / 2**30
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20  # kB -> GiB
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: kB


def read_bandwidth_gbs(device: str = "cpu", gib: float = 1.0, reps: int = 5) -> float:
    """The memory read bandwidth of `device` in GB/s: the best of `reps` sums over a `gib` GiB float32 tensor
    (far larger than any cache), with torch's threads."""
    import torch

    x = torch.ones(int(gib * 2**30) // 4, device=device)
    best = float("inf")
    for _ in range(reps):
        t = time.perf_counter()
        x.sum().item()  # .item() waits for the GPU too
        best = min(best, time.perf_counter() - t)
    return x.numel() * 4 / best / 1e9


def our_decode(policy, tok, problem):
    """A function T -> the 8 (GROUP) completions of `problem` forced to T tokens by our sampler (the one
    rollout.sample picks: decode.decode on a CPU, fast/fixed_decode.py on CUDA), inside
    cpu_linear.sampling_weights where the tree has it (as rollout.sample runs it). Returns it with the prompt's
    encoding; call it under torch.no_grad with the policy in eval mode and its adapter set."""
    import contextlib

    import coder
    import decode
    import rollout
    try:
        from fast.cpu_linear import sampling_weights
    except ImportError:  # an earlier tree
        sampling_weights = lambda *a: contextlib.nullcontext()  # noqa: E731

    enc = rollout.encode_prompts(tok, [coder.messages(problem, None)], next(policy.parameters()).device)
    sampler = decode.decode
    if enc.input_ids.is_cuda:  # the sampler rollout.sample runs on CUDA (fixed shapes; --cuda-graph: one graph a step)
        from fast import fixed_decode
        sampler = fixed_decode.decode_fixed

    def run(T):
        with sampling_weights(policy, GROUP):
            return sampler(policy, enc.input_ids, enc.attention_mask, GROUP, T, tok.eos_token_id, TEMPERATURE, TOP_P, T)
    return run, enc


def decode_ms(policy, tok, problem, short: int, long: int) -> dict:
    """ms per decode step at batch GROUP (prefill excluded: (t(long) - t(short)) / (long - short)), our loop
    (our_decode) and `generate`, each forced to the full length, the policy in eval mode with its adapter."""
    import torch

    ours, enc = our_decode(policy, tok, problem)
    policy.eval()
    out = {}
    runs = {"ours": ours,
            "generate": lambda T: policy.generate(**enc, num_return_sequences=GROUP, max_new_tokens=T, min_new_tokens=T,
                                                  do_sample=True, temperature=TEMPERATURE, top_p=TOP_P, top_k=None,
                                                  pad_token_id=tok.eos_token_id)}
    sync = torch.cuda.synchronize if enc.input_ids.is_cuda else (lambda: None)
    with torch.no_grad():
        for name, run in runs.items():
            run(short)  # warm-up
            secs = {}
            for T in (short, long):
                sync()
                t = time.perf_counter()
                run(T)
                sync()
                secs[T] = time.perf_counter() - t
            out[name] = 1000 * (secs[long] - secs[short]) / (long - short)
    policy.train()
    return out


def worker_ours(a, two_roles: bool) -> dict:
    """Warm-up + counted train.grpo_step calls with fixed completion lengths, on this tree or --tree."""
    import torch

    import data
    import train
    from infra import models

    torch.manual_seed(0)
    G, M = (2, GROUP // 2) if two_roles else (GROUP, 1)  # plans x codes per plan
    flags = {"--roles": "planner,coder" if two_roles else "coder", "--problems-per-step": 1, "--num-plans": G,
             "--codes-per-plan": M, "--max-plan-tokens": a.plan_tokens, "--max-code-tokens": a.code_tokens,
             "--beta": BETA, "--temperature": TEMPERATURE, "--top-p": TOP_P, "--lr": LR, "--lora-r": LORA_R,
             "--lora-alpha": LORA_ALPHA, "--sandbox-timeout": SANDBOX_TIMEOUT_S}
    args = train.get_args([str(x) for kv in flags.items() for x in kv] + (["--cuda-graph"] if a.cuda_graph else []))
    try:  # as TrainingRun.setup does: the sampler's token step as one CUDA graph (CUDA only)
        from fast import fixed_decode
        fixed_decode.GRAPH = args.cuda_graph
    except ImportError:  # an earlier tree
        pass
    base, tok = models.load_base(a.model, a.device, "none", a.dtype)
    weights = sum(p.numel() * p.element_size() for p in base.parameters())
    policy = models.add_role_adapters(base, models.ROLES, args.lora_r, args.lora_alpha)
    fix_lengths(policy, tok, natural_lengths(a) if a.lengths == "natural" else None)
    optimizer = torch.optim.AdamW([p for n, p in policy.named_parameters() if "lora_" in n], lr=args.lr)
    problem = data.load("train")[0]
    steps, cpu, tokens, phases = [], [], [], []
    for i in range(a.warmup + a.steps):
        c = time.process_time()
        m, _ = train.grpo_step(policy, tok, [problem], args, optimizer)
        if i >= a.warmup:
            steps.append(m["time_step_s"])
            cpu.append(time.process_time() - c)
            tokens.append(m["code_tokens"] * G * M + (m["plan_tokens"] * G if two_roles else 0))  # means x rows
            phases.append({k: v for k, v in m.items() if k.startswith("time_")})
    out = dict(step_s=steps, cpu_s=cpu, tokens=tokens, phases=phases, peak_rss_gib=peak_memory_gib(a.device), weights_bytes=weights,
               dtype=str(next(base.parameters()).dtype).removeprefix("torch."))
    if a.decode and not two_roles:
        policy.set_adapter("coder")
        out["decode_ms"] = decode_ms(policy, tok, problem, *((4, 12) if a.quick else (16, 80)))
    return out


def natural_lengths(a) -> list:
    return quick_lengths(NATURAL, a.code_tokens) if a.quick else list(NATURAL)


def launch(system: str, lengths: str, a) -> dict:
    """Run one repetition of `system` in a fresh interpreter; its last stdout line is the JSON result."""
    python = a.trl_python if system == "trl" else sys.executable
    tree = Path(a.before).resolve() if system == "before" else ROOT
    cmd = [python, str(Path(__file__).resolve()), "--worker", "ours2role" if system == "ours2role" else
           ("trl" if system == "trl" else "ours"), "--tree", str(tree), "--lengths", lengths, "--model", a.model,
           "--dtype", a.dtype, "--device", a.device, "--steps", str(a.steps), "--warmup", str(a.warmup), "--code-tokens", str(a.code_tokens),
           "--plan-tokens", str(a.plan_tokens)] + (["--quick"] if a.quick else []) + \
        (["--cuda-graph"] if a.cuda_graph and system != "trl" else []) + \
        (["--decode"] if system == "ours" and lengths == "forced" else [])
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=tree)
    if p.returncode != 0:
        sys.exit(f"error: worker {system} ({lengths}) failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def summary(runs: list) -> dict:
    """One table row from a system's worker results."""
    steps = [s for r in runs for s in r["step_s"]]  # seconds, every counted step of every repetition
    tokens = statistics.median([t for r in runs for t in r["tokens"]])
    return dict(step=statistics.median(steps), lo=min(steps), hi=max(steps), rss=max(r["peak_rss_gib"] for r in runs),
                cpu=statistics.median([c for r in runs for c in r.get("cpu_s", [])] or [float("nan")]),
                tokens=tokens, dtypes=sorted({r["dtype"] for r in runs}))


def equal_work(rows: dict) -> str | None:
    """None when the compared systems (COMPARED) of one length setting did the same work: tokens per step
    within 1 % of each other and one weights dtype; else the reason, one line. rows: system -> summary."""
    compared = {s: r for s, r in rows.items() if s in COMPARED}
    tokens = [r["tokens"] for r in compared.values()]
    if len(compared) > 1 and (max(tokens) - min(tokens)) > 0.01 * min(tokens):
        return "tokens per step differ by more than 1 %: " + ", ".join(f"{s} {r['tokens']:.0f}" for s, r in compared.items())
    dtypes = {d for r in compared.values() for d in r["dtypes"]}
    if len(dtypes) > 1:
        return "the systems ran different dtypes: " + ", ".join(f"{s} {'/'.join(r['dtypes'])}" for s, r in compared.items())
    return None


def print_table(lengths: str, results: dict, a) -> tuple[str | None, dict]:
    """One length setting's table; returns (why no ratio could be printed or None, {"trl": ratios, ...})."""
    rows = {s: summary(runs) for s, runs in results.items()}
    budget = a.code_tokens
    what = (f"every completion {budget} tokens" if lengths == "forced" else
            f"completions end with EOS after {', '.join(map(str, natural_lengths(a)))} tokens")
    print(f"\n{lengths} lengths ({what}); dtype {', '.join(sorted({d for r in rows.values() for d in r['dtypes']}))}")
    peak = "peak GPU GiB" if getattr(a, "device", "cpu") == "cuda" else "peak RSS GiB"
    print(f"{'system':10} {'median s':>8} {'min-max s':>13} {peak:>13} {'tokens/step':>12} {'gen tok/s':>10} "
          f"{'CPU s':>8}")
    for s, r in rows.items():
        span = f"{r['lo']:.2f}-{r['hi']:.2f}"
        print(f"{s:10} {r['step']:8.2f} {span:>13} {r['rss']:13.2f} {r['tokens']:12.0f} {r['tokens'] / r['step']:10.1f} "
              f"{r['cpu']:8.2f}")
    why = equal_work(rows)
    ratios = {}
    if why:
        print(f"NO RATIO: {why}")
        return why, ratios
    for other in ("trl", "before"):
        if "ours" in rows and other in rows:
            o, t = rows["ours"], rows[other]
            ratios[other] = (o["step"] / t["step"], o["rss"] / t["rss"])
            print(f"{'ours/' + other:10} {ratios[other][0]:7.2f}x {'':13} {ratios[other][1]:12.2f}x {'':12} "
                  f"{(o['tokens'] / o['step']) / (t['tokens'] / t['step']):9.2f}x {o['cpu'] / t['cpu']:7.2f}x")
    return None, ratios


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default="SmolLM2-135M-Instruct", help="the same for all systems (models.resolve)")
    ap.add_argument("--systems", default="ours,trl,ours2role", help="comma-separated: ours, trl, ours2role, before")
    ap.add_argument("--before", default=None, help="a checkout of this project to run as the 'before' system")
    ap.add_argument("--lengths", default="forced,natural", help="comma-separated: forced, natural")
    ap.add_argument("--device", default="cpu", choices=["cpu", "cuda"], help="every system on it (no quantisation)")
    ap.add_argument("--dtype", default="float32", help="one dtype for every system (models.DTYPES; TRL: float32, bfloat16)")
    ap.add_argument("--reps", type=int, default=2, help="fresh-process repetitions of each system")
    ap.add_argument("--steps", type=int, default=3, help="counted steps per repetition")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted steps first")
    ap.add_argument("--code-tokens", type=int, default=128, help="token budget (forced: length) of every code completion")
    ap.add_argument("--plan-tokens", type=int, default=48, help="forced length of every plan (ours2role)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 8 tokens, 1 rep, 1 step, no warm-up")
    ap.add_argument("--cuda-graph", action="store_true", help="our sampler's token step as a CUDA graph (train.py's flag)")
    ap.add_argument("--trl-python", default=sys.executable, help="a python that can import trl")
    ap.add_argument("--worker", choices=["ours", "trl", "ours2role"], help=argparse.SUPPRESS)
    ap.add_argument("--tree", default=str(ROOT), help=argparse.SUPPRESS)
    ap.add_argument("--decode", action="store_true", help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.reps, a.steps, a.warmup, a.code_tokens, a.plan_tokens = 1, 1, 0, 8, 8
    if a.worker:  # inside a fresh subprocess, on the code of --tree: one JSON line on stdout
        sys.path.insert(0, a.tree)
        if a.worker == "trl":
            from trl_worker import worker_trl  # bench/: the same work through TRL's GRPOTrainer
            r = worker_trl(a, argparse.Namespace(
                group=GROUP, beta=BETA, temperature=TEMPERATURE, top_p=TOP_P, lr=LR, lora_r=LORA_R,
                lora_alpha=LORA_ALPHA, sandbox_timeout_s=SANDBOX_TIMEOUT_S, peak_memory_gib=peak_memory_gib,
                natural=natural_lengths(a) if a.lengths == "natural" else None))
        else:
            r = worker_ours(a, two_roles=a.worker == "ours2role")
        print(json.dumps(r))
        return

    systems = a.systems.split(",") + (["before"] if a.before and "before" not in a.systems.split(",") else [])
    if "before" in systems and not a.before:
        sys.exit("error: the 'before' system needs --before PATH (a checkout of this project)")
    if "trl" in systems and subprocess.run([a.trl_python, "-c", "import trl"], capture_output=True).returncode:
        print("TRL is not importable: pip install -r bench/requirements.txt (or pass --trl-python); "
              "running our rows only")
        systems.remove("trl")
    settings = a.lengths.split(",")
    import torch

    print(f"{a.reps} repetitions x ({a.warmup} warm-up + {a.steps} counted steps); {a.device}, dtype {a.dtype}; "
          f"{torch.get_num_threads()} torch threads")
    results = {ln: {s: [] for s in systems if ln == "forced" or s != "ours2role"} for ln in settings}
    for rep in range(a.reps):
        for ln in settings:
            for s in results[ln]:
                t0 = time.perf_counter()
                results[ln][s].append(launch(s, ln, a))
                print(f"rep {rep + 1} {ln} {s}: {time.perf_counter() - t0:.0f} s", flush=True)
    failed, ratios = [], {}
    for ln in settings:
        why, ratios[ln] = print_table(ln, results[ln], a)
        if why:
            failed.append(ln)
    ours = [r for ln in settings for r in results[ln].get("ours", []) if "decode_ms" in r]
    limit_ms = None
    if ours:
        bw = read_bandwidth_gbs(a.device, 0.25 if a.quick else 1.0)
        weights = ours[0]["weights_bytes"]
        limit_ms = 1000 * weights / (bw * 1e9)
        d = {k: statistics.median([r["decode_ms"][k] for r in ours]) for k in ("ours", "generate")}
        print(f"\ndecode at batch {GROUP}, ms per step (one token for each row, prefill excluded): ours {d['ours']:.1f}, "
              f"generate {d['generate']:.1f} (ours/generate {d['ours'] / d['generate']:.2f}x); bandwidth limit "
              f"{limit_ms:.1f} ms = {weights / 2**20:.0f} MiB of weights / {bw:.1f} GB/s measured read bandwidth; "
              f"ours {d['ours'] / limit_ms:.1f}x the limit")
    goals = []
    for ln in settings:
        if "trl" in ratios[ln]:
            t, m = ratios[ln]["trl"]
            goals.append(f"{ln}: step time <= 0.5x TRL's {'met' if t <= 0.5 else 'NOT met'} ({t:.2f}x), "
                         f"peak RSS <= 0.5x TRL's {'met' if m <= 0.5 else 'NOT met'} ({m:.2f}x)")
    if ours:
        goals.append(f"decode within 3x of the bandwidth limit {'met' if d['ours'] <= 3 * limit_ms else 'NOT met'}")
    if goals:
        print("goals: " + "; ".join(goals))
    for s in [s for s in systems if s != "trl"]:
        for ln in settings:
            phases = [p for r in results[ln].get(s, []) for p in r["phases"]]
            if phases:
                print(f"\n{s} ({ln}):", end="")
                sys.path.insert(0, str(ROOT))
                from infra import progress

                progress.print_profile(phases)
    if failed:
        sys.exit(f"error: unequal work in the {', '.join(failed)} setting(s): no ratio printed")


if __name__ == "__main__":
    main()
