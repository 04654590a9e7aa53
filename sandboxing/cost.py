"""A program's cost, measured by the parent from outside the run, where the program cannot touch it.

What ranks programs by speed or memory (the efficiency reward, eval's NET / NMU, the paper's columns) reads
this, never the per-test figures the child reports (Result.test_cpu_s / test_mem_mb: a diagnostic only: a
program can do its work at import time, patch the clocks or write a timing of its own through the report
channel, docs/sandbox.md#h11-claimed-per-test-timing).

    cpu_s    the run's CPU seconds (user + sys) of ALL its processes, from the interpreter's start to the
             end: wait4's rusage of the process we spawned -- with a pid namespace every process of the
             run is reaped inside that tree, so all of it is there -- or the run's cgroup CPU counter
             (v2 cpu.stat, v1 cpuacct.usage) where the run has one and it says more (a process that left
             the tree: the unsafe modes)
    peak_mb  the run's memory peak, MiB: its cgroup's memory.peak / max_usage_in_bytes (every process and
             tmpfs file of the run together, the kernel's count) where it has one; else the larger of
             wait4's ru_maxrss (the largest single process's peak, kept by the kernel) and the watchdog's
             sampled sum (sandboxing/memory.py)
Both include the program's top level (its imports, any work done before the first test) and every
process it started. The fixed cost is the same job run with an EMPTY program: the program's top-level
functions and classes as stubs (`def f(*a, **k): pass`, so that each test is planned as the program's
is, kinds.plan_tests), i.e. the interpreter, our runner, the tests' modules and setup, the judge, and
each test failing at once. It is measured FIXED_RUNS times per job and its median subtracted:

    cost_s  = max(0, cpu_s   - median of FIXED_RUNS fixed cpu_s)
    cost_mb = max(0, peak_mb - median of FIXED_RUNS fixed peak_mb)

Per test: function tests run in one process (the program once, then its tests), so no figure per test
exists from outside; a test's share is cost_s / tests, the whole run's split evenly (our choice, stated
wherever a per-test cost is used). Source: our choice, after EffiBench's ET / MU (measure/efficiency.py), which
are per test and measured in the program's process.
"""
import ast
import contextlib
import hashlib
import statistics
import threading

FIXED_RUNS = 3  # empty-program runs per job; their median is the fixed cost (docs/sandbox.md: the spread)
_fixed: dict = {}  # job key -> (cpu_s, peak_mb), for this process's life (a few hundred bytes a job)
_lock = threading.Lock()


def outside(usage, group=None, watchdog_mb=0.0) -> tuple[float, float]:
    """(cpu_s, peak_mb) of a run from what the parent holds once it has reaped it (module docstring).

    usage: os.wait4's rusage of the spawned process; group: the run's cgroup (sandboxing/cgroup.py's
    Cgroup, or None); watchdog_mb: the watchdog's peak sum, MiB (used only without a cgroup).
    >>> from types import SimpleNamespace as U
    >>> outside(U(ru_utime=0.03, ru_stime=0.01, ru_maxrss=20480), None, 12.0)
    (0.04, 20.0)
    """
    cpu = usage.ru_utime + usage.ru_stime
    counted = group.cpu_seconds() if group is not None else None
    if counted is not None:
        cpu = max(cpu, counted)
    if group is not None:
        return cpu, group.peak_bytes() / 2**20
    return cpu, max(usage.ru_maxrss / 1024, watchdog_mb)


def stub(program: str) -> str:
    """The empty program that stands for `program` in its fixed cost: its top-level functions and
    classes with empty bodies, nothing else ("pass" when it defines none or does not parse).
    >>> print(stub("import math\\ndef f(x):\\n    return math.sqrt(x)\\nclass S:\\n    def m(self): pass"))
    def f(*a, **k): pass
    class S: pass
    """
    lines = []
    with contextlib.suppress(Exception):
        for node in ast.parse(program).body:
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                lines.append(f"def {node.name}(*a, **k): pass")
            elif isinstance(node, ast.ClassDef):
                lines.append(f"class {node.name}: pass")
    return "\n".join(lines) or "pass"


def key(program, *job) -> str:
    """What the fixed cost depends on: the program's stub (its names decide how each test is planned) and
    the rest of the job (tests, I/O tests, setup, limits, mode, budget), as a digest."""
    return hashlib.sha256(repr((stub(program), job)).encode()).hexdigest()


def fixed(key, run_empty) -> tuple[float, float]:
    """The fixed cost (cpu_s, peak_mb) of the job `key`: the median of FIXED_RUNS calls of run_empty() ->
    (cpu_s, peak_mb), measured once per key in this process (two threads may both measure it: harmless)."""
    with _lock:
        if key in _fixed:
            return _fixed[key]
    runs = [run_empty() for _ in range(FIXED_RUNS)]
    found = (statistics.median(c for c, _ in runs), statistics.median(m for _, m in runs))
    with _lock:
        _fixed[key] = found
    return found


def net(measured, base) -> tuple[float, float]:
    """(cost_s, cost_mb): the run's (cpu_s, peak_mb) less the fixed cost's, never below 0.
    >>> net((0.065, 230.0), (0.040, 25.0))
    (0.025, 205.0)
    """
    return round(max(0.0, measured[0] - base[0]), 4), round(max(0.0, measured[1] - base[1]), 1)
