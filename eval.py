"""pass@k of the base model and of trained adapters, as a direct Coder and as Planner -> Coder.

    python eval.py --dataset humaneval                        # base SmolLM2, direct, greedy
    python eval.py --dataset val --modes direct,planned --adapters runs/<run>
    python eval.py --dataset mbpp:path/to/mbpp.jsonl --n 10 --k 1,5 --temperature 0.8

Rows of the table: system (base | trained) x mode (direct: plan-less Coder prompt;
planned: the Planner writes a plan, the Coder follows it). Writes a JSON file with the table and
every problem's verdicts.
"""
import argparse
import json
import sys
import time
from math import prod
from pathlib import Path

import torch
from tqdm import tqdm

import coder
import data
import models
import planner
import rollout
import sandbox

def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code", eq. 1): 1 - C(n-c, k) / C(n, k), computed as the stable
    product 1 - prod_{i=n-c+1}^{n} (1 - k / i). Raises ValueError when k > n."""
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))


def generate_programs(model, tok, problems, mode, args, adapters: bool) -> list:
    """n programs per problem (list of lists of str | None) for mode 'direct' or 'planned'."""
    out = []
    batches = range(0, len(problems), args.batch_size)
    for s in tqdm(batches, desc=f"{'trained' if adapters else 'base'} {mode}", dynamic_ncols=True):
        batch = problems[s:s + args.batch_size]
        plans = [None] * len(batch)  # direct: one plan-less prompt per problem, n samples each
        if mode == "planned":  # n plans per problem, then one program per plan
            if adapters:
                model.set_adapter("planner")
            r = rollout.sample(model, tok, [planner.messages(p) for p in batch], args.n,
                               args.max_plan_tokens, args.temperature)
            plans = [planner.parse(t) for t in r.texts]
        if adapters:
            model.set_adapter("coder")
        per = len(plans) // len(batch)  # Coder prompts per problem: n when planned, else 1
        chats = [coder.messages(batch[i // per], plans[i]) for i in range(len(plans))]
        r = rollout.sample(model, tok, chats, args.n // per, args.max_code_tokens, args.temperature,
                           stop=coder.STOP)
        for i, p in enumerate(batch):  # rows are problem-major either way: n per problem
            texts = r.texts[i * args.n:(i + 1) * args.n]
            out.append([coder.program(p, coder.extract_code(t)) for t in texts])
    return out


def score(problems, programs, ks, args) -> dict:
    """Run every program in the sandbox; returns {'pass@k': ..., 'problems': [...]}."""
    jobs = [dict(program=prog, tests=list(p.tests), setup=p.setup, timeout_s=args.sandbox_timeout)
            for p, progs in zip(problems, programs) for prog in progs]
    results = iter(sandbox.run_many(jobs, workers=args.workers))
    rows = []
    for p, progs in zip(problems, programs):
        res = [next(results) for _ in progs]
        rows.append({"task_id": p.task_id, "passed": sum(r.verdict == "passed" for r in res),
                     "verdicts": [r.verdict for r in res], "details": [r.detail for r in res]})
    table = {f"pass@{k}": sum(pass_at_k(args.n, r["passed"], k) for r in rows) / len(rows) for k in ks}
    return {**table, "problems": rows}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    a = ap.add_argument
    a("--dataset", default="val", help="train | val | humaneval | mbpp:<file or hub id>[@split] | <file.jsonl>")
    a("--model", default=models.EMBEDDED)
    a("--adapters", default=None, help="a run folder of train.py: adds the 'trained' rows")
    a("--modes", default="direct", help="comma list of direct, planned")
    a("--n", type=int, default=1, help="samples per problem")
    a("--k", default="1", help="comma list of k for pass@k (each <= n)")
    a("--temperature", type=float, default=0.0, help="0 = greedy")
    a("--max-plan-tokens", type=int, default=48, help="as in training")
    a("--max-code-tokens", type=int, default=256)
    a("--batch-size", type=int, default=16, help="problems per generate call")
    a("--limit", type=int, default=None, help="only the first N problems")
    a("--device", default="auto", choices=["auto", "cpu", "cuda"])
    a("--quant", default="auto", choices=["auto", "4bit", "none"])
    a("--sandbox-timeout", type=float, default=4.0)
    a("--workers", type=int, default=None)
    a("--out", default=None, help="JSON file (default runs/eval-<dataset>-<time>.json)")
    args = ap.parse_args(argv)
    ks = [int(k) for k in args.k.split(",")]
    modes = args.modes.split(",")
    if bad := [m for m in modes if m not in ("direct", "planned")]:
        ap.error(f"unknown mode {bad[0]}: use direct, planned")
    if max(ks) > args.n:
        ap.error(f"pass@{max(ks)} needs --n >= {max(ks)}")
    if args.n > 1 and args.temperature <= 0:
        ap.error("--n > 1 needs sampling: set --temperature > 0")

    problems = data.load(args.dataset)[:args.limit]
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    quant = models.default_quant(device) if args.quant == "auto" else args.quant
    model, tok = models.load_base(args.model, device, quant)
    model.eval()
    report = {"dataset": args.dataset, "model": args.model, "adapters": args.adapters, "n": args.n,
              "temperature": args.temperature, "rows": []}
    systems = [("base", False)] + ([("trained", True)] if args.adapters else [])
    for system, adapters in systems:
        if adapters:
            model = models.load_role_adapters(model, args.adapters, models.ROLES)
        for mode in modes:
            res = score(problems, generate_programs(model, tok, problems, mode, args, adapters), ks, args)
            report["rows"].append({"system": system, "mode": mode, **res})

    print(f"\n{args.dataset}: {len(problems)} problems, n={args.n}, temperature={args.temperature}")
    print(f"{'system':8} {'mode':8} " + " ".join(f"{'pass@' + str(k):>8}" for k in ks))
    for row in report["rows"]:
        print(f"{row['system']:8} {row['mode']:8} " + " ".join(f"{100 * row[f'pass@{k}']:7.1f}%" for k in ks))
    out = Path(args.out or f"runs/eval-{Path(args.dataset).stem.replace(':', '-')}-{time.strftime('%Y%m%d-%H%M%S')}.json")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1))
    print(f"wrote {out}")
    return report


if __name__ == "__main__":
    try:
        main()
    except (models.ModelError, data.DataError) as e:
        sys.exit(f"error: {e}")
