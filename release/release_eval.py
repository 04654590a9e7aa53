"""`python eval.py --protocol release`: the CoRe-Code authors' evaluation protocol (AlbertZhaoCA/e1,
evaluation/ours.py), beside ours (greedy pass@1 over problems, eval.py).

Per problem: the Planner writes ONE plan at temperature 0.2, then the Coder writes K = 5 programs from it at
temperature 0.2; each runs on the problem's tests in the sandbox. Three numbers over problems:

    first-of-K pass@1   1[the FIRST of the K programs passes every test]   (the release's "pass@1")
    pass@K              1[any of the K passes]                              (the release's "pass@5")
    unbiased pass@1     c / K, c = programs that pass                       (Chen et al. 2021: pass_at_k(K, c, 1))

Why the first and the unbiased pass@1 differ: both estimate the chance that one program drawn from the Coder
passes, but the first-of-K looks at one draw per problem and throws the other K - 1 away, so its variance over
problems is larger; the unbiased one averages all K (the same expectation, a narrower interval). On one
evaluation they can differ by a lot: a problem whose first program fails and whose four others pass counts 0
in the first, 0.8 in the unbiased (tests/release/test_release.py). Each number comes with its 95 % percentile-bootstrap
interval over problems (stats.bootstrap_ci).
"""
import json
import platform
import time
from pathlib import Path

from tqdm import tqdm

import tree
from measure import stats

K, TEMPERATURE = 5, 0.2  # evaluation/ours.py: call_api(..., n=5), temperature 0.2 for the plan and the programs


def programs(sample, problems, args, k: int = K, temperature: float = TEMPERATURE) -> list[list]:
    """One plan per problem, then k programs from it: [[k programs (str | None)] per problem].

    sample(role, chats, n, max_tokens, temperature, stop): eval.sample_as bound to a model, its tokenizer and
    adapters (a scripted one in the tests); the rollout tree (tree.build, judge=False) parses and assembles."""
    import roles

    def generate(role, chats, n):
        return sample(role, chats, n, roles.max_tokens(args, role), temperature, roles.ROLES[role].stop)

    out = []
    for s in tqdm(range(0, len(problems), args.batch_size), desc="eval release protocol", dynamic_ncols=True):
        t = tree.build(problems[s:s + args.batch_size], ["planner", "coder"], {"planner": 1, "coder": k}, generate,
                       timeout_s=args.sandbox_timeout, judge=False)
        out += t.final_programs()
    return out


def summary(verdicts: list[list[str]]) -> dict:
    """[[K verdicts] per problem] -> the three numbers (module docstring), each {value, ci: [lo, hi]}."""
    n = len(verdicts[0]) if verdicts else 0
    per = {"first_pass@1": [float(v[0] == "passed") for v in verdicts],
           f"pass@{n}": [float("passed" in v) for v in verdicts],
           "unbiased_pass@1": [stats.pass_at_k(n, v.count("passed"), 1) for v in verdicts]}
    return {name: {"value": sum(xs) / len(xs) if xs else float("nan"), "ci": list(stats.bootstrap_ci(xs))}
            for name, xs in per.items()}


def main(args, subset, load_runs, sample_as) -> dict:
    """eval.py --protocol release: every dataset, the base model (and --adapters' run) through the protocol;
    prints one Markdown table and writes the JSON (one row per problem: its K verdicts). eval.py hands over its
    own seeded problem subset (subset), adapter loading (load_runs) and sampler (sample_as), so that nothing here
    imports the entry script above it."""
    from functools import partial

    import torch

    import data
    import sandbox
    from infra import models
    from measure import scoring
    from sandboxing import checkers

    torch.manual_seed(args.seed)
    sets = {}
    for spec in args.datasets.split(","):
        problems = checkers.use(data.load(spec)[:args.limit], args.checker)
        sets[spec] = [problems[i] for i in subset(problems, args.sample, spec)]
    isolation = sandbox.require(args.unsafe_sandbox, memory_mb=args.sandbox_memory)
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    model, tok = models.load_base(args.model, device, models.default_quant(device) if args.quant == "auto"
                                  else args.quant, dtype=args.dtype)
    systems = [("base plan", None)]
    if args.adapters:
        model, runs, _, _, _ = load_runs(model, [args.adapters])
        systems.append(("trained plan", runs[0][1]))
    model.eval()
    out = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{platform.machine()}, {device}", "model": args.model,
           "protocol": "release", "k": args.n, "temperature": args.temperature, "sandbox": isolation, "results": {}}
    lines = ["| dataset | system | problems | first-of-K pass@1 % | unbiased pass@1 % | pass@K % |", "|---" * 6 + "|"]
    for spec, problems in sets.items():
        for name, adapters in systems:
            t = time.perf_counter()
            progs = programs(partial(sample_as, model, tok, adapters), problems, args, args.n, args.temperature)
            rows = scoring.score(problems, progs, [1], args)["problems"]
            s = summary([r["verdicts"] for r in rows])
            out["results"].setdefault(spec, {})[name] = {**s, "seconds": time.perf_counter() - t, "problems": [
                {"task_id": r["task_id"], "verdicts": r["verdicts"]} for r in rows]}
            cell = lambda m: f"{100 * m['value']:.1f} [{100 * m['ci'][0]:.1f}, {100 * m['ci'][1]:.1f}]"
            lines.append(f"| {spec} | {name} | {len(problems)} | {cell(s['first_pass@1'])} | "
                         f"{cell(s['unbiased_pass@1'])} | {cell(s[f'pass@{args.n}'])} |")
    path = Path(args.out or f"runs/eval-release-{time.strftime('%Y%m%d-%H%M%S')}.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(out, indent=1))
    print("\n".join(lines) + f"\nwrote {path}")
    return out
