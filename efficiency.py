"""Efficiency of correct code, measured as EffiBench measures it.

Source: EffiBench (Huang, Qing, Shang, Cui, Zhang 2024, "EffiBench: Benchmarking the Efficiency of
Automatically Generated Code", arXiv 2402.02037, the section "Efficiency metrics"); the formulas
below were checked against the authors' own script (github.com/huangd1999/EffiBench,
calculate_memory_usage.py): ratios are taken PER PROBLEM against the canonical solution on the same
tests and then averaged over problems, only programs that pass every test count.

Per program p that passes every test of problem i, from the sandbox's per-test figures
(sandbox.Result.test_cpu_s / test_mem_mb):
    ET_p  = sum_t cpu_s[t]       seconds: CPU time of the tests' own execution (start-up, imports and
                                 the program's top level excluded)
    MU_p  = max_t mem_mb[t]      MiB: peak memory of a test above what the process held before it
The reference solution of problem i run once on the same tests gives ET_ref,i and MU_ref,i, and
    NET_p = max(ET_p, ET_FLOOR_S) / max(ET_ref,i, ET_FLOOR_S)
    NMU_p = max(MU_p, MU_FLOOR_MB) / max(MU_ref,i, MU_FLOOR_MB)
Problem i: the mean of each figure over its passing programs (EffiBench has one program per problem;
with n samples we average them). A system: the mean over the problems EVERY system solves (a system
that solves more, harder problems would otherwise look slower), plus the share of its passing programs
on those problems with NET > 2 (EffiBench reports the share with NET > 5; 2 is our choice: a
program twice as slow as the reference is already worth counting).

Our choices, with reasons:
- CPU time, not EffiBench's wall time: on a shared 2-core machine wall time includes waiting for a core.
- The floors: a 30-microsecond test read 30-90 us in 15 fresh interpreters on this machine (2 cores,
  2026-12-01), so ratios of sub-millisecond times are mostly noise; below ET_FLOOR_S both sides count
  as equal (NET = 1). ru_maxrss-style peaks move in ~0.1 MiB steps for small work; hence MU_FLOOR_MB.
- TMU / NTMU (EffiBench's total memory usage, the integral of memory over time in MB*s, from
  memory_profiler samples) are NOT reported: the sandbox records one peak per test, not a trace over
  time, and most tests end before a sampler's first sample; MU x time would only be an upper bound.
"""
ET_FLOOR_S = 1e-3  # CPU seconds; grpo.efficiency_bonus uses the same floor (tests/test_efficiency.py)
MU_FLOOR_MB = 1.0  # MiB
SLOW_NET = 2.0  # "slow" program: NET > SLOW_NET


def program_cost(result) -> tuple[float, float] | None:
    """(ET seconds, MU MiB) of a sandbox Result that passed every test, else None.

    result: anything with .verdict, .test_cpu_s, .test_mem_mb (per-test tuples, as sandbox.Result). None also
    when the timing is missing (a sandbox without per-test timing, or a test that never ran).
    >>> from types import SimpleNamespace as R
    >>> program_cost(R(verdict="passed", test_cpu_s=(0.002, 0.003), test_mem_mb=(0.5, 2.0)))
    (0.005, 2.0)
    """
    cpu, mem = getattr(result, "test_cpu_s", None), getattr(result, "test_mem_mb", None)
    if result.verdict != "passed" or not cpu or not mem or None in cpu or None in mem:
        return None
    return sum(cpu), max(mem)


def ratio(x: float, ref: float, floor: float) -> float:
    """max(x, floor) / max(ref, floor): the normalised figure (NET or NMU) of one program."""
    return max(x, floor) / max(ref, floor)


def problem_row(costs: list, ref: tuple | None) -> dict:
    """Efficiency fields of one problem's eval row.

    costs: [(ET s, MU MiB) or None] for the problem's n programs (None: failed or untimed);
    ref: the reference solution's (ET, MU), or None (no reference, or it did not pass).
    Returns {et_ms, mu_mb, net, nmu, timed, net_gt2, ref_et_ms, ref_mu_mb}: means over the timed passing
    programs (None when there is none; net / nmu also None without a reference), timed = their number,
    net_gt2 = how many of them have NET > SLOW_NET.
    """
    ok = [c for c in costs if c is not None]
    row = {"et_ms": None, "mu_mb": None, "net": None, "nmu": None, "timed": len(ok), "net_gt2": 0,
           "ref_et_ms": None if ref is None else 1000 * ref[0], "ref_mu_mb": None if ref is None else ref[1]}
    if not ok:
        return row
    row["et_ms"] = 1000 * sum(et for et, _ in ok) / len(ok)
    row["mu_mb"] = sum(mu for _, mu in ok) / len(ok)
    if ref is not None:
        nets = [ratio(et, ref[0], ET_FLOOR_S) for et, _ in ok]
        row["net"] = sum(nets) / len(nets)
        row["nmu"] = sum(ratio(mu, ref[1], MU_FLOOR_MB) for _, mu in ok) / len(ok)
        row["net_gt2"] = sum(n > SLOW_NET for n in nets)
    return row


def common_problems(rows: dict) -> set:
    """Task ids every system solves with timing, and (when the set has references at all) whose
    reference passed. rows: {system: eval row with 'problems': [{task_id, et_ms, ref_et_ms, ...}]}."""
    sets, has_ref = [], False
    for r in rows.values():
        ps = r["problems"]
        has_ref |= any(p.get("ref_et_ms") is not None for p in ps)
        sets.append({p["task_id"] for p in ps if p.get("et_ms") is not None})
    common = set.intersection(*sets) if sets else set()
    if has_ref:
        ref_ok = {p["task_id"] for r in rows.values() for p in r["problems"] if p.get("ref_et_ms") is not None}
        common &= ref_ok
    return common


def summary(rows: dict) -> tuple[dict, int]:
    """Per system {et_ms, net, mu_mb, nmu, slow_share} over the common problems (module docstring).

    rows: {system: eval row}. A figure is None when no problem is common (or, for net / nmu /
    slow_share, when the set has no references). slow_share: passing programs with NET > 2 / all
    passing programs on the common problems. Returns (that dict, number of common problems).
    """
    common = common_problems(rows)
    out = {}
    for name, r in rows.items():
        ps = [p for p in r["problems"] if p["task_id"] in common]
        mean = lambda key: (sum(p[key] for p in ps) / len(ps)) if ps and all(p.get(key) is not None for p in ps) else None  # noqa: E731
        timed = sum(p["timed"] for p in ps)
        net = mean("net")
        out[name] = {"et_ms": mean("et_ms"), "net": net, "mu_mb": mean("mu_mb"), "nmu": mean("nmu"),
                     "slow_share": sum(p["net_gt2"] for p in ps) / timed if net is not None and timed else None}
    return out, len(common)
