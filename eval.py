"""Evaluate systems on problem sets: pass@k, verdicts, efficiency of correct code, lengths, time.

    python eval.py --dataset humaneval                                # base model, direct Coder, greedy
    python eval.py --dataset val --modes direct,plan --adapters runs/<run>
    python eval.py --compare sft=runs/sft coder=runs/coder core=runs/core --datasets val,humaneval

A system is (adapters, mode). Adapters: none (the base model) or the roles a train.py run saved.
Mode 'direct': the Coder writes code from the problem alone; 'plan': the Planner writes a plan
and the Coder follows it. --compare evaluates base direct, base plan and each run in its own mode
(plan for a Planner+Coder run, direct for a single-agent `--roles coder` run) on every dataset, then
report.py writes results.json, results.md (the paper-style table) and curves.png.
"""
import argparse
import json
import platform
import sys
import time
from contextlib import nullcontext
from math import prod
from pathlib import Path

import torch
from tqdm import tqdm

import coder
import data
import models
import planner
import report
import rollout
import sandbox


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code", eq. 1): 1 - C(n-c, k) / C(n, k), computed as the stable
    product 1 - prod_{i=n-c+1}^{n} (1 - k / i). Raises ValueError when k > n."""
    # BEGIN SOLUTION pass_at_k
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))
    # END SOLUTION


def generate_programs(model, tok, problems, mode, args, adapters: dict | None) -> tuple[list, dict]:
    """n programs per problem for mode 'direct' or 'plan'.

    adapters: {role: adapter name} of a trained run, or None for the base model (adapters off).
    Returns (programs: one list of n str | None per problem, stats: mean plan / code tokens).
    """
    out, plan_tokens, code_tokens = [], [], []
    from peft import PeftModel

    off = model.disable_adapter() if adapters is None and isinstance(model, PeftModel) else nullcontext()
    with off:
        for s in tqdm(range(0, len(problems), args.batch_size), desc=f"{mode}", dynamic_ncols=True):
            batch = problems[s:s + args.batch_size]
            plans = [None] * len(batch)  # direct: one plan-less prompt per problem, n samples each
            if mode == "plan":  # n plans per problem, then one program per plan
                if adapters:
                    model.set_adapter(adapters["planner"])
                r = rollout.sample(model, tok, [planner.messages(p) for p in batch], args.n,
                                   args.max_plan_tokens, args.temperature)
                plans = [planner.parse(t) for t in r.texts]
                plan_tokens += r.mask.sum(1).tolist()
            if adapters:
                model.set_adapter(adapters["coder"])
            per = len(plans) // len(batch)  # Coder prompts per problem: n when planned, else 1
            chats = [coder.messages(batch[i // per], plans[i]) for i in range(len(plans))]
            r = rollout.sample(model, tok, chats, args.n // per, args.max_code_tokens, args.temperature,
                               stop=coder.STOP)
            code_tokens += r.mask.sum(1).tolist()
            for i, p in enumerate(batch):  # rows are problem-major either way: n per problem
                texts = r.texts[i * args.n:(i + 1) * args.n]
                out.append([coder.program(p, coder.extract_code(t)) for t in texts])
    mean = lambda xs: sum(xs) / len(xs) if xs else None  # noqa: E731
    return out, {"plan_tokens": mean(plan_tokens), "code_tokens": mean(code_tokens)}


def score(problems, programs, ks, args) -> dict:
    """Run every program in the sandbox.

    Returns {'pass@k': mean over problems of the unbiased estimator, 'verdicts': {verdict: count},
    'problems': [{task_id, passed, verdicts, cpu_ms, peak_mb}]} where cpu_ms / peak_mb are the
    means over the problem's passing programs (None if none passed): the CPU milliseconds of the
    sandboxed run (interpreter start included, the same for every system) and its peak RSS (MiB).
    """
    jobs = [dict(program=prog, tests=list(p.tests), setup=p.setup, timeout_s=args.sandbox_timeout)
            for p, progs in zip(problems, programs) for prog in progs]
    results = iter(sandbox.run_many(jobs, workers=args.workers))
    rows = []
    for p, progs in zip(problems, programs):
        res = [next(results) for _ in progs]
        ok = [r for r in res if r.verdict == "passed"]
        rows.append({"task_id": p.task_id, "passed": len(ok), "verdicts": [r.verdict for r in res],
                     "details": [r.detail for r in res],
                     "cpu_ms": 1000 * sum(r.cpu_s for r in ok) / len(ok) if ok else None,
                     "peak_mb": sum(r.peak_rss_mb for r in ok) / len(ok) if ok else None})
    n = len(programs[0]) if programs else 0
    table = {f"pass@{k}": sum(pass_at_k(n, r["passed"], k) for r in rows) / max(len(rows), 1) for k in ks}
    verdicts = [v for r in rows for v in r["verdicts"]]
    return {**table, "verdicts": {v: verdicts.count(v) for v in sandbox.VERDICTS if v in verdicts}, "problems": rows}


def run_systems(model, tok, problems, systems, ks, args) -> dict:
    """{system name: row} for systems [(name, adapters dict | None, mode)] on one problem set."""
    rows = {}
    for name, adapters, mode in systems:
        t = time.perf_counter()
        programs, stats = generate_programs(model, tok, problems, mode, args, adapters)
        gen_s = time.perf_counter() - t
        rows[name] = {"mode": mode, **score(problems, programs, ks, args), **stats, "generation_s": gen_s}
        print(f"  {name:24} " + " ".join(f"pass@{k} {100 * rows[name][f'pass@{k}']:5.1f}%" for k in ks)
              + f"  ({gen_s:.0f} s)", flush=True)
    return rows


def load_runs(model, runs: list) -> tuple:
    """Attach each run's adapters (names '<i>_<role>') to one base; returns (model, systems)."""
    systems = []
    for i, spec in enumerate(runs):
        name, _, path = spec.rpartition("=")
        path = Path(path)
        cfg_file = path / "config.json"
        if not cfg_file.exists():
            raise models.ModelError(f"{path} is not a train.py run folder (no config.json)")
        roles = json.loads(cfg_file.read_text()).get("roles", models.ROLES)
        model = models.load_role_adapters(model, path, roles, prefix=f"{i}_")
        mode = "plan" if "planner" in roles else "direct"
        systems.append((name or path.name, {r: f"{i}_{r}" for r in roles}, mode))
    return model, systems


def get_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = ap.add_argument
    a("--dataset", "--datasets", dest="datasets", default="val",
      help="comma list of: train | val | humaneval | mbpp:<file or hub id>[@split] | <file.jsonl>; "
           "NAME#N keeps the first N problems of that one")
    a("--split", default=None, help="split of a hub dataset (same as mbpp:<id>@<split>)")
    a("--model", default=models.EMBEDDED)
    a("--adapters", default=None, help="a train.py run folder: adds its rows ('trained')")
    a("--compare", nargs="+", default=None, metavar="[NAME=]RUN",
      help="train.py runs to compare with base direct and base plan (writes results.json/.md, curves.png)")
    a("--modes", default="direct", help="comma list of direct, plan (without --compare)")
    a("--n-samples", "--n", dest="n", type=int, default=1, help="samples per problem")
    a("--k", default="1", help="comma list of k for pass@k (each <= n)")
    a("--temperature", type=float, default=0.0, help="0 = greedy")
    a("--seed", type=int, default=0)
    a("--max-plan-tokens", type=int, default=48, help="as in training")
    a("--max-code-tokens", type=int, default=256)
    a("--batch-size", type=int, default=32, help="problems per generate call")
    a("--limit", type=int, default=None, help="only the first N problems of each dataset")
    a("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a("--quant", default="auto", choices=["auto", "4bit", "none"])
    a("--sandbox-timeout", type=float, default=4.0)
    a("--workers", type=int, default=None)
    a("--out", default=None, help="JSON file, or the folder with --compare (default under runs/)")
    args = ap.parse_args(argv)
    args.ks = [int(k) for k in args.k.split(",")]
    args.modes = ["plan" if m == "planned" else m for m in args.modes.split(",")]
    if bad := [m for m in args.modes if m not in ("direct", "plan")]:
        ap.error(f"unknown mode {bad[0]}: use direct, plan")
    if max(args.ks) > args.n:
        ap.error(f"pass@{max(args.ks)} needs --n-samples >= {max(args.ks)}")
    if args.n > 1 and args.temperature <= 0:
        ap.error("--n-samples > 1 needs sampling: set --temperature > 0")
    if args.compare and args.adapters:
        ap.error("use either --adapters or --compare")
    return args


def main(argv=None):
    args = get_args(argv)
    torch.manual_seed(args.seed)
    datasets = {}
    for spec in args.datasets.split(","):
        name, _, n = spec.partition("#")
        name += f"@{args.split}" if args.split and "@" not in name else ""
        datasets[spec] = data.load(name)[:int(n) if n else args.limit]
    names = list(datasets)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    quant = models.default_quant(device) if args.quant == "auto" else args.quant
    model, tok = models.load_base(args.model, device, quant)
    systems = [(f"base {m}", None, m) for m in (("direct", "plan") if args.compare else args.modes)]
    if args.compare or args.adapters:
        model, runs = load_runs(model, args.compare or [args.adapters])
        if args.adapters:  # one run, in every mode asked for
            runs = [(f"trained {m}", runs[0][1], m) for m in args.modes if m == "direct" or "planner" in runs[0][1]]
        systems += runs
    model.eval()
    results = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.machine()}, {device}",
               "model": args.model, "n": args.n, "temperature": args.temperature, "ks": args.ks,
               "systems": [{"name": s, "mode": m, "adapters": a} for s, a, m in systems], "results": {}}
    t0 = time.perf_counter()
    for d, problems in datasets.items():
        print(f"{d}: {len(problems)} problems, n={args.n}, temperature={args.temperature}")
        results["results"][d] = run_systems(model, tok, problems, systems, args.ks, args)
    results["wall_s"] = time.perf_counter() - t0

    stamp = time.strftime("%Y%m%d-%H%M%S")
    if args.compare:
        out = Path(args.out or f"runs/compare-{stamp}")
        out.mkdir(parents=True, exist_ok=True)
        print("\n" + report.write(results, out, [p.rpartition("=")[2] for p in args.compare]))
    else:
        out = Path(args.out or f"runs/eval-{Path(names[0]).stem.replace(':', '-')}-{stamp}.json")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(results, indent=1))
        print("\n" + report.markdown(results))
    print(f"wrote {out}")
    return results


if __name__ == "__main__":
    try:
        main()
    except (models.ModelError, data.DataError) as e:
        sys.exit(f"error: {e}")
