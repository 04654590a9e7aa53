"""Programs judged in the sandbox: pass@k, the verdicts, and the efficiency of the correct ones.

    table = scoring.score(problems, programs, [1], args)    # programs: [[source] * n] per problem

Every program runs in the sandbox against its problem's tests (Problem.sandbox_job); the verdict is the
sandbox's, never the program's own output. pass@k is the unbiased estimator of Chen et al. 2021 (measure/stats.py)
over the n programs of each problem; the efficiency figures are EffiBench's (measure/efficiency.py), normalised by
the problem's reference solution where `reference_costs` could run it.
"""
import coder
import sandbox
from measure import efficiency
from measure.stats import pass_at_k


def reference_costs(problems, args) -> list:
    """Run each problem's reference solution once, as the Coder's programs are run (coder.program).

    Returns [(ET s, MU MiB) or None] per problem (efficiency.program_cost): None when the problem has
    no solution, the solution fails, or the sandbox gives no per-test timing.
    """
    have = [i for i, p in enumerate(problems) if p.solution]
    jobs = [dict(problems[i].sandbox_job(coder.program(problems[i], problems[i].solution), args.sandbox_timeout),
                 cost=True) for i in have]
    out = [None] * len(problems)
    for i, r in zip(have, sandbox.run_many(jobs, workers=args.workers) if jobs else []):
        out[i] = efficiency.program_cost(r)
    return out


def score(problems, programs, ks, args, refs: list | None = None) -> dict:
    """Run every program in the sandbox.

    refs: [(ET s, MU MiB) or None] per problem from `reference_costs` (None: no normalised figures).
    Returns {'pass@k': mean over problems of the unbiased estimator, 'verdicts': {verdict: count},
    'problems': [{task_id, passed, verdicts, details, cpu_ms, peak_mb, et_ms, mu_mb, net, nmu, timed,
    net_gt2, ref_et_ms, ref_mu_mb}]}: cpu_ms / peak_mb are means over the passing programs of the whole
    sandboxed run (interpreter start included) and its peak RSS; et_ms ... ref_mu_mb are EffiBench's
    figures, from the cost measured outside each run (efficiency.problem_row). None where no program passed.
    """
    jobs = [dict(p.sandbox_job(prog, args.sandbox_timeout), cost=True) for p, progs in zip(problems, programs)
            for prog in progs]  # cost: each program's, measured outside its run (efficiency.program_cost)
    results = iter(sandbox.run_many(jobs, workers=args.workers))
    refs = refs or [None] * len(problems)
    rows = []
    for p, progs, ref in zip(problems, programs, refs):
        res = [next(results) for _ in progs]
        ok = [r for r in res if r.verdict == "passed"]
        rows.append({"task_id": p.task_id, "passed": len(ok), "verdicts": [r.verdict for r in res],
                     **({"unsafe": True} if any(getattr(r, "unsafe", False) for r in res) else {}),  # run without namespaces
                     "details": [r.detail for r in res],
                     "cpu_ms": 1000 * sum(r.cpu_s for r in ok) / len(ok) if ok else None,
                     "peak_mb": sum(r.peak_rss_mb for r in ok) / len(ok) if ok else None,
                     **efficiency.problem_row([efficiency.program_cost(r) for r in res], ref)})
    n = len(programs[0]) if programs else 0
    table = {f"pass@{k}": sum(pass_at_k(n, r["passed"], k) for r in rows) / max(len(rows), 1) for k in ks}
    verdicts = [v for r in rows for v in r["verdicts"]]
    return {**table, "verdicts": {v: verdicts.count(v) for v in sandbox.VERDICTS if v in verdicts}, "problems": rows}
