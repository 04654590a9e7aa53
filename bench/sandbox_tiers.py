"""The cost of one run per isolation tier (not a timed test: a table for docs/sandbox.md).

    python bench/sandbox_tiers.py [--runs 20]

Runs a trivial function program (one value test) and a trivial I/O program (two tests) in each tier this
process can use -- as root `root` (namespaces) and `landlock`; as an ordinary user `user` and `landlock`
-- alternating the tiers run by run, and prints the median wall time of a run (the spawn to the child
reaped: what run_program's caller waits for), ms. Forcing mode= runs a tier whether or not isolation()
would pick it; run it with the system's python3 as an ordinary user to compare what such a user gets on
Ubuntu 22.04 (user namespaces) and 24.04 (Landlock).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import sandbox  # noqa: E402

PROGRAMS = {"function": ("def f(x):\n    return 2 * x\n", ["assert f(2) == 4"], {}),
            "I/O": ("print(sum(map(int, input().split())))\n", [], {"io_tests": [("1 2\n", "3\n"), ("2 2\n", "4\n")]})}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=20, help="runs per tier and program")
    args = ap.parse_args()
    tiers = ("root" if os.geteuid() == 0 else "user", "landlock")
    print(f"| program | {' | '.join(f'{t}, ms' for t in tiers)} | ratio |\n|---|---|---|---|")
    for name, (program, tests, kwargs) in PROGRAMS.items():
        walls = {t: [] for t in tiers}
        for _ in range(args.runs):
            for tier in tiers:
                start = time.perf_counter()
                r = sandbox.run_program(program, tests, timeout_s=2.0, mode=tier, **kwargs)
                walls[tier].append(time.perf_counter() - start)
                assert r.verdict == "passed", (tier, r.verdict, r.detail)
        ms = [statistics.median(walls[t]) * 1000 for t in tiers]
        print(f"| {name} | {ms[0]:.1f} | {ms[1]:.1f} | {ms[1] / ms[0]:.2f}x |")


if __name__ == "__main__":
    main()
