"""Efficiency of correct code, measured as EffiBench measures it.

Source: EffiBench (Huang, Qing, Shang, Cui, Zhang 2024, "EffiBench: Benchmarking the Efficiency of
Automatically Generated Code", arXiv 2402.02037, the section "Efficiency metrics"); the formulas
below were checked against the authors' own script (github.com/huangd1999/EffiBench,
calculate_memory_usage.py): ratios are taken PER PROBLEM against the canonical solution on the same
tests and then averaged over problems, only programs that pass every test count.

Per program p that passes every test of problem i, from the sandbox's cost measured OUTSIDE the run, where
the program cannot touch it (sandbox.Result.cost_s / cost_mb, sandboxing/cost.py; run_program(cost=True)):
    ET_p  = cost_s               seconds: CPU of all the run's processes (the program's top level and
                                 imports included) less that of an empty program on the same tests
    MU_p  = cost_mb              MiB: the run's memory peak (its cgroup's, else the largest process's)
                                 less the empty program's
EffiBench's ET sums per-test times and its MU takes the largest per-test peak; ours are the whole run's, so
work done at import time or hidden from the program's own clocks counts (docs/sandbox.md#h11-claimed-per-test-timing).
The per-test figures the program's process reports (Result.test_cpu_s / test_mem_mb) are a diagnostic only.
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
- The floors: the fixed cost subtracted from a run's CPU (~15 ms) spreads by a few ms between runs on a
  shared 2-core machine (docs/sandbox.md#the-spread-over-repetitions), so ratios of times below ET_FLOOR_S
  are mostly noise; below it both sides count as equal (NET = 1). A cgroup's peak of an empty program moves
  by ~0.5 MiB between runs; hence MU_FLOOR_MB.
- TMU / NTMU (EffiBench's total memory usage, the integral of memory over time in MB*s, from
  memory_profiler samples) are NOT reported: the sandbox records one peak per test, not a trace over
  time, and most tests end before a sampler's first sample; MU x time would only be an upper bound.
"""
ET_FLOOR_S = 5e-3  # CPU seconds; reward.efficiency_bonus uses the same floor (tests/measure/test_efficiency.py)
MU_FLOOR_MB = 1.0  # MiB
SLOW_NET = 2.0  # "slow" program: NET > SLOW_NET


def program_cost(result) -> tuple[float, float] | None:
    """(ET seconds, MU MiB) of a sandbox Result that passed every test, else None.

    result: anything with .verdict, .cost_s, .cost_mb (sandbox.Result from run_program(cost=True)). None
    also when the cost was not measured (cost=False).
    >>> from types import SimpleNamespace as R
    >>> program_cost(R(verdict="passed", cost_s=0.005, cost_mb=2.0))
    (0.005, 2.0)
    """
    cpu, mem = getattr(result, "cost_s", None), getattr(result, "cost_mb", None)
    if result.verdict != "passed" or cpu is None or mem is None:
        return None
    return cpu, mem


def release_bonus(runtime_s, peak_mb):
    """The authors' released efficiency reward (GitHub AlbertZhaoCA/e1, reward_function/codewc.py), added only
    when every test passes: 0.1 * exp(-3 * runtime_s) + 0.1 * exp(-0.1 * peak_MB). runtime_s, peak_mb: floats or tensors
    of the same shape (here ET and MU: cost_s and cost_mb, measured outside the run; our reading of the
    release's "runtime" and "peak memory"). Returns the same shape, in (0, 0.2].
    >>> round(release_bonus(0.05, 10.0), 6)
    0.122859
    """
    import torch
    t, m = torch.as_tensor(runtime_s, dtype=torch.float64), torch.as_tensor(peak_mb, dtype=torch.float64)
    out = 0.1 * torch.exp(-3 * t) + 0.1 * torch.exp(-0.1 * m)
    return out.item() if out.dim() == 0 else out


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
