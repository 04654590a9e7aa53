"""Correct programs that claim a speed they do not have, for tests/sandboxing/test_sandbox_cost.py and
bench/sandbox_cost.py: what an efficiency reward trained on the program's own figures would teach.

All compute f(n) = sum(i * i for i in range(n)) for the tests' inputs (INPUTS) with the same loop, and pass
every test; they differ in where the work happens and what they make the runner's in-process clocks say:
    honest        the loop in each test
    import time   the loop for every input at the top level, before the first test; the tests look up
    clock patch   time.process_time / perf_counter / monotonic / thread_time and resource.getrusage
                  replaced by zeros, then the honest loop
    report        the honest loop, then the runner's report closure (found on the heap, as the forgers of
                  tests/sandboxing/test_sandbox_forgery.py find it) sends each test's value with a timing of 0 s first
What the sandbox measures from outside (sandboxing/cost.py) is the same for all four: the same work.
"""
INPUTS = (200_000, 210_000, 220_000, 230_000, 240_000)  # ~10 ms of CPU each on a 2-core AMD EPYC
TESTS = [f"assert f({n}) == {sum(i * i for i in range(n))}" for n in INPUTS]

LOOP = "def work(n):\n    s = 0\n    for i in range(n):\n        s += i * i\n    return s\n"
PROGRAMS = {
    "honest": LOOP + "def f(n):\n    return work(n)\n",
    "import time": LOOP + f"TABLE = {{n: work(n) for n in {INPUTS!r}}}\ndef f(n):\n    return TABLE[n]\n",
    "clock patch": "import resource, time\n"
                   "for name in ('process_time', 'perf_counter', 'monotonic', 'thread_time', 'time'):\n"
                   "    setattr(time, name, lambda *a: 0.0)\n"
                   "class Zero:\n    def __getattr__(self, name):\n        return 0\n"
                   "resource.getrusage = lambda *a: Zero()\n" + LOOP + "def f(n):\n    return work(n)\n",
    "report": "import gc\n" + LOOP
              + "def reporter():\n"
                "    return next(o for o in gc.get_objects()\n"
                "                if getattr(getattr(o, '__code__', None), 'co_name', '') == 'report')\n"
                "CALLS = [0]\n"
                "def f(n):\n    value = work(n)\n"
                "    reporter()('value', CALLS[0], value, 0.0, 0.0, 0.0)  # the first report of a test counts\n"
                "    CALLS[0] += 1\n    return value\n",
}

# Time and memory ordering: the same answer at O(n) and O(n^2) (n = 1500: 1500 vs 1.1 million steps),
# and a program that holds 200 MiB from its top level against one that holds nothing.
PAIRS_N = 1500
PAIRS_TESTS = [f"assert pairs({PAIRS_N}) == {PAIRS_N * (PAIRS_N - 1) // 2}"]
LINEAR = "def pairs(n):\n    c = 0\n    for i in range(n):\n        c += i\n    return c\n"
QUADRATIC = "def pairs(n):\n    c = 0\n    for i in range(n):\n        for j in range(i):\n            c += 1\n    return c\n"
HOLDS = "HELD = b'x' * (200 << 20)\ndef g(x):\n    return x + 1\n"
LIGHT = "def g(x):\n    return x + 1\n"
G_TESTS = ["assert g(1) == 2", "assert g(2) == 3"]
