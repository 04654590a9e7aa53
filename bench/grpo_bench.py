"""Wall time and memory of one GRPO step: ours (train.grpo_step) against TRL's GRPOTrainer.

    python bench/grpo_bench.py                          # ours, TRL, ours2role; 2 repetitions of 1 + 3 steps
    python bench/grpo_bench.py --quick --systems ours   # smoke test: 8 tokens, 1 step, no warm-up

TRL lives in its own environment; no product file imports it:
    python -m venv --system-site-packages /tmp/trlvenv && /tmp/trlvenv/bin/pip install -r bench/requirements.txt
    python bench/grpo_bench.py --trl-python /tmp/trlvenv/bin/python   # or run the bench with that python

The same work for every system: the embedded SmolLM2-135M-Instruct, CPU, float32, LoRA r=16
alpha=32 on q,k,v,o; one problem (data.load("train")[0]) x 8 completions, each exactly
--code-tokens new tokens (min_new_tokens = max_new_tokens; our closed-fence stop is switched
off); temperature 1.0, top_p 0.95; KL beta 0.04 to the base model (adapters off); one AdamW
step, lr 2e-4; reward = pass rate of our sandbox (sandbox.run_many, same workers and timeout).
  ours       single-role mode: train.grpo_step with --roles coder, 1 problem x 8 codes
  trl        GRPOTrainer(num_generations=8, per_device_train_batch_size=8): one step = 1 prompt x 8
             completions. TRL's own defaults otherwise (e.g. gradient checkpointing on, as shipped)
  ours2role  what collaboration costs: 2 plans (--plan-tokens each) x 4 codes per plan
Each repetition runs in a fresh subprocess (`--worker NAME`, prints one JSON line), the systems
alternating (ours, trl, ours2role, ours, trl, ...) so that drifting machine load hits all alike.
A worker runs --warmup uncounted steps, then --steps counted ones.

Columns: step wall time in seconds (median and min-max over all counted steps of all
repetitions); peak RSS in GiB (the worker's VmHWM, max over repetitions; sandbox child
processes not included); generated tokens per step (counted from the completion masks, so it
checks the forced length); generated tokens per second of step wall time (end to end).
Then the ratios ours/TRL and, for our rows, seconds per phase of a step (grpo_step's time_*_s).

Reference, measured on this machine (2 cores) before our code existed: TRL 1.16.0 GRPOTrainer on
about this configuration ~25 s/step, peak RSS ~5.4 GB. Goals: ours <= 0.8x TRL's step wall
time and <= 0.5x TRL's peak RSS.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
import models  # noqa: E402
import torch  # noqa: E402

GROUP = 8  # completions per problem and step, both systems
LORA_R, LORA_ALPHA, BETA, LR, TEMPERATURE, TOP_P, SANDBOX_TIMEOUT_S = 16, 32, 0.04, 2e-4, 1.0, 0.95, 4.0


def peak_rss_gib() -> float:
    """This process's peak resident set size (VmHWM) in GiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 2**20  # kB -> GiB
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20  # Linux: kB


def force_full_length():
    """Make every sampled completion use its whole token budget: EOS is forbidden before
    max_new_tokens (rollout.sample's min_new_tokens) and the closed-fence stop is off (coder.STOP)."""
    import coder
    import rollout

    coder.STOP = None
    sample = rollout.sample

    def forced(policy, tok, chats, n, max_new_tokens, *rest, **kw):
        return sample(policy, tok, chats, n, max_new_tokens, *rest, **{**kw, "min_new_tokens": max_new_tokens})
    rollout.sample = forced  # train.grpo_step looks it up at call time


def worker_ours(a, two_roles: bool) -> dict:
    """Warm-up + counted train.grpo_step calls; every completion forced to its full token budget."""
    import data
    import train

    torch.manual_seed(0)
    G, M = (2, GROUP // 2) if two_roles else (GROUP, 1)  # plans x codes per plan
    flags = {"--roles": "planner,coder" if two_roles else "coder", "--problems-per-step": 1, "--num-plans": G,
             "--codes-per-plan": M, "--max-plan-tokens": a.plan_tokens, "--max-code-tokens": a.code_tokens,
             "--beta": BETA, "--temperature": TEMPERATURE, "--top-p": TOP_P, "--lr": LR, "--lora-r": LORA_R,
             "--lora-alpha": LORA_ALPHA, "--sandbox-timeout": SANDBOX_TIMEOUT_S}
    args = train.get_args([str(x) for kv in flags.items() for x in kv])
    force_full_length()
    base, tok = models.load_base(a.model, "cpu", "none")
    policy = models.add_role_adapters(base, models.ROLES, args.lora_r, args.lora_alpha)
    optimizer = torch.optim.AdamW([p for n, p in policy.named_parameters() if "lora_" in n], lr=args.lr)
    problem = data.load("train")[0]
    steps, tokens, phases = [], [], []
    for i in range(a.warmup + a.steps):
        m, _ = train.grpo_step(policy, tok, [problem], args, optimizer)
        if i >= a.warmup:
            steps.append(m["time_step_s"])
            tokens.append(m["code_tokens"] * G * M + (m["plan_tokens"] * G if two_roles else 0))  # means x rows
            phases.append({k: v for k, v in m.items() if k.startswith("time_")})
    return dict(step_s=steps, tokens=tokens, phases=phases, peak_rss_gib=peak_rss_gib())


def worker_trl(a) -> dict:
    """The same work through TRL's GRPOTrainer; a callback times each optimisation step."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    import coder
    import data
    import sandbox

    problem = data.load("train")[0]

    def reward(prompts, completions, **kwargs):  # conversational: completions[i] = [{"role", "content"}]
        jobs = [dict(program=coder.program(problem, coder.extract_code(c[-1]["content"])), tests=list(problem.tests),
                     setup=problem.setup, timeout_s=SANDBOX_TIMEOUT_S) for c in completions]
        return [r.pass_rate for r in sandbox.run_many(jobs, workers=os.cpu_count())]

    steps, tokens = [], []

    class Timer(TrainerCallback):
        def on_step_begin(self, args, state, control, **kw):
            self.t = time.perf_counter()

        def on_step_end(self, args, state, control, **kw):
            steps.append(time.perf_counter() - self.t)

        def on_log(self, args, state, control, logs=None, **kw):  # logging_steps=1: one log per step
            if logs and "completions/mean_length" in logs:
                tokens.append(logs["completions/mean_length"] * GROUP)

    n = a.warmup + a.steps
    with tempfile.TemporaryDirectory() as out:
        config = GRPOConfig(
            output_dir=out, num_generations=GROUP, per_device_train_batch_size=GROUP, gradient_accumulation_steps=1,
            max_completion_length=a.code_tokens, generation_kwargs={"min_new_tokens": a.code_tokens},
            beta=BETA, num_iterations=1, temperature=TEMPERATURE, top_p=TOP_P, learning_rate=LR,
            use_cpu=True, bf16=False, fp16=False, report_to="none", logging_steps=1, max_steps=n,
            save_strategy="no", disable_tqdm=True, seed=0)
        trainer = GRPOTrainer(
            model=models.resolve(a.model), reward_funcs=reward, args=config,
            train_dataset=Dataset.from_list([{"prompt": coder.messages(problem, None)}] * n),
            peft_config=LoraConfig(r=LORA_R, lora_alpha=LORA_ALPHA, target_modules=models.LORA_TARGETS,
                                   task_type="CAUSAL_LM"),
            callbacks=[Timer()])
        trainer.train()
    return dict(step_s=steps[a.warmup:], tokens=tokens[a.warmup:], phases=[], peak_rss_gib=peak_rss_gib())


def launch(system: str, a) -> dict:
    """Run one repetition of `system` in a fresh interpreter; its last stdout line is the JSON result."""
    python = a.trl_python if system == "trl" else sys.executable
    cmd = [python, __file__, "--worker", system, "--model", a.model, "--steps", str(a.steps), "--warmup", str(a.warmup),
           "--code-tokens", str(a.code_tokens), "--plan-tokens", str(a.plan_tokens)]
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    if p.returncode != 0:
        sys.exit(f"error: worker {system} failed (exit {p.returncode}):\n{p.stderr[-3000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def print_table(results: dict):
    """One row per system, then the ratios ours/TRL; results: system -> list of worker dicts."""
    print(f"\n{'system':10} {'median s':>8} {'min-max s':>13} {'peak RSS GiB':>13} {'tokens/step':>12} "
          f"{'gen tok/s':>10}")
    rows = {}
    for system, runs in results.items():
        steps = [s for r in runs for s in r["step_s"]]  # seconds, every counted step of every repetition
        step = statistics.median(steps)
        tokens = statistics.median([t for r in runs for t in r["tokens"]])
        rss = max(r["peak_rss_gib"] for r in runs)
        rows[system] = (step, rss, tokens / step)
        span = f"{min(steps):.2f}-{max(steps):.2f}"
        print(f"{system:10} {step:8.2f} {span:>13} {rss:13.2f} {tokens:12.0f} {tokens / step:10.1f}")
    if "ours" in rows and "trl" in rows:
        ratio = [o / t for o, t in zip(rows["ours"], rows["trl"])]  # step s, peak RSS, tok/s
        print(f"{'ours/trl':10} {ratio[0]:7.2f}x {'':13} {ratio[1]:12.2f}x {'':12} {ratio[2]:9.2f}x")
        print(f"goals: step time <= 0.8x TRL's {'met' if ratio[0] <= 0.8 else 'NOT met'}; "
              f"peak RSS <= 0.5x TRL's {'met' if ratio[1] <= 0.5 else 'NOT met'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", default=models.EMBEDDED, help="the same for all systems (models.resolve)")
    ap.add_argument("--systems", default="ours,trl,ours2role", help="comma-separated: ours, trl, ours2role")
    ap.add_argument("--reps", type=int, default=2, help="fresh-process repetitions of each system")
    ap.add_argument("--steps", type=int, default=3, help="counted steps per repetition")
    ap.add_argument("--warmup", type=int, default=1, help="uncounted steps first")
    ap.add_argument("--code-tokens", type=int, default=128, help="forced length of every code completion")
    ap.add_argument("--plan-tokens", type=int, default=48, help="forced length of every plan (ours2role)")
    ap.add_argument("--quick", action="store_true", help="smoke test: 8 tokens, 1 rep, 1 step, no warm-up")
    ap.add_argument("--trl-python", default=sys.executable, help="a python that can import trl")
    ap.add_argument("--worker", choices=["ours", "trl", "ours2role"], help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.quick:
        a.reps, a.steps, a.warmup, a.code_tokens, a.plan_tokens = 1, 1, 0, 8, 8
    if a.worker:  # inside a fresh subprocess: one JSON line on stdout
        r = worker_trl(a) if a.worker == "trl" else worker_ours(a, two_roles=a.worker == "ours2role")
        print(json.dumps(r))
        return

    systems = a.systems.split(",")
    if "trl" in systems and subprocess.run([a.trl_python, "-c", "import trl"], capture_output=True).returncode:
        print("TRL is not importable: pip install -r bench/requirements.txt (or pass --trl-python); "
              "running our rows only")
        systems.remove("trl")
    print(f"{a.reps} repetitions x ({a.warmup} warm-up + {a.steps} counted steps); completions forced to "
          f"{a.code_tokens} code / {a.plan_tokens} plan tokens; {torch.get_num_threads()} torch threads")
    results = {s: [] for s in systems}
    for rep in range(a.reps):
        for s in systems:
            t0 = time.perf_counter()
            results[s].append(launch(s, a))
            print(f"rep {rep + 1} {s}: {time.perf_counter() - t0:.0f} s", flush=True)
    print_table(results)
    import train

    for s in [s for s in systems if s != "trl"]:
        print(f"\n{s}:", end="")
        train.print_profile([p for r in results[s] for p in r["phases"]])


if __name__ == "__main__":
    main()
