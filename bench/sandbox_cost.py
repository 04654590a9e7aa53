"""A program's cost measured outside its run (sandboxing/cost.py) against the figures its own process reports.

    python bench/sandbox_cost.py [--reps 9]

Prints three tables (docs/sandbox.md#h11-claimed-per-test-timing keeps a copy with machine, load and date):
  1. the forgers of sandboxing/forgers.py (same work, same answers): the tests' CPU as the program's process
     reports it, the whole run's CPU from outside, the cost (less the empty program's fixed cost) and its
     NET against the honest program -- medians of --reps runs, with min-max;
  2. the spread: the fixed cost (empty program) and the honest program's cost over the runs, and the NET of
     the honest program against itself (run i over the median; and the median of each 3 runs): what one run,
     and what three, leave;
  3. what measuring costs: ms of wall time per run_program without cost, with cost once the job's fixed
     cost is known, and the fixed cost's own measurement (cost.FIXED_RUNS runs, once per job);
and the two orderings the tests check: O(n) vs O(n^2), and 200 MiB held from import vs nothing.
"""
import argparse
import os
import resource
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sandbox  # noqa: E402
from sandboxing import cost, forgers  # noqa: E402


def cpu_now():
    """CPU seconds, user + system, of this process and its reaped children (the runs) so far."""
    own, runs = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + runs.ru_utime + runs.ru_stime


def spread(xs, scale=1.0, fmt="{:.1f}"):
    xs = [x * scale for x in xs]
    return f"{fmt.format(statistics.median(xs))} ({fmt.format(min(xs))}-{fmt.format(max(xs))})"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=9, help="runs of each program (the medians)")
    reps = ap.parse_args().reps
    print(f"isolation {sandbox.isolation().mode}; {sandbox.memory.describe(sandbox.MEMORY_MB)}; {reps} runs each")

    runs = {name: [sandbox.run_program(p, forgers.TESTS, cost=True) for _ in range(reps)]
            for name, p in forgers.PROGRAMS.items()}
    honest = statistics.median(r.cost_s for r in runs["honest"])
    print("\n| program | verdict | tests' CPU as reported, ms | the whole run's CPU from outside, ms | cost, ms "
          "(fixed cost subtracted) | NET vs honest |\n|---|---|---|---|---|---|")
    for name, rs in runs.items():
        print(f"| {name} | {rs[0].verdict} | {spread([sum(r.test_cpu_s) for r in rs], 1000)} | "
              f"{spread([r.cpu_s for r in rs], 1000)} | {spread([r.cost_s for r in rs], 1000)} | "
              f"{statistics.median(r.cost_s for r in rs) / honest:.2f} |")

    empty = [cost.stub(forgers.PROGRAMS["honest"])] * reps
    fixed = [sandbox.run_program(p, forgers.TESTS) for p in empty]
    nets = [r.cost_s / honest for r in runs["honest"]]
    print(f"\n| figure | median (min-max) over {reps} runs |\n|---|---|")
    print(f"| fixed cost: the empty program's CPU, ms | {spread([r.cpu_s for r in fixed], 1000)} |")
    print(f"| fixed cost: the empty program's peak, MiB | {spread([r.outside_mb for r in fixed])} |")
    print(f"| the honest program's cost, ms | {spread([r.cost_s for r in runs['honest']], 1000)} |")
    print(f"| the honest program's NET against its own median, one run | {spread(nets, fmt='{:.2f}')} |")
    triples = [statistics.median(nets[i:i + 3]) for i in range(0, len(nets) - 2, 3)]
    if len(triples) > 1:
        print(f"| the same, the median of 3 runs ({len(triples)} triples) | {spread(triples, fmt='{:.2f}')} |")

    program = forgers.PROGRAMS["honest"]
    rows = {"without cost": lambda k: {}, "with cost, fixed cost known": lambda k: {"cost": True},
            f"with cost, a new job ({cost.FIXED_RUNS} empty runs first)":  # another timeout: another job
            lambda k: {"cost": True, "timeout_s": 4.0 + k / 1000}}
    print(f"\n| run_program, the honest program ({len(forgers.TESTS)} tests) | CPU ms, ours and the runs' | wall ms |"
          "\n|---|---|---|")
    for label, kwargs in rows.items():
        cpus, walls = [], []
        for k in range(reps):
            t0, w0 = cpu_now(), time.perf_counter()
            sandbox.run_program(program, forgers.TESTS, **kwargs(k))
            cpus.append(cpu_now() - t0)
            walls.append(time.perf_counter() - w0)
        print(f"| {label} | {spread(cpus, 1000)} | {spread(walls, 1000)} |")

    pairs = [[sandbox.run_program(p, forgers.PAIRS_TESTS, cost=True).cost_s for _ in range(reps)]
             for p in (forgers.LINEAR, forgers.QUADRATIC)]
    held = [[sandbox.run_program(p, forgers.G_TESTS, cost=True).cost_mb for _ in range(reps)]
            for p in (forgers.LIGHT, forgers.HOLDS)]
    print(f"\nO(n) vs O(n^2), n = {forgers.PAIRS_N}: cost {spread(pairs[0], 1000)} vs {spread(pairs[1], 1000)} ms; "
          f"nothing vs 200 MiB held from import: {spread(held[0])} vs {spread(held[1])} MiB")


if __name__ == "__main__":
    main()
