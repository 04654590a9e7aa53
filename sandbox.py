"""Run an untrusted program against its tests and tell the truth about the result.

The reward of a generated program is its pass rate here, so this file decides what GRPO learns:
if a program can make itself look correct, the policy learns to cheat; if a run hangs or leaks
processes, training dies at step 3,000. This file is the sandbox's one entry point: what a run is
(the job, the limits, the Result, the isolation mode), run_program, run_many, self_check, require and
`python sandbox.py --check`. Its internals live in the sandboxing/ package, one idea per file (the
package's docstring lists them): our side of a run (process, kinds, judge, check, checkers, special_checker)
and the child's (runner, child, confine, io_tests, judge_process). A reader of the training loop
needs only `run_program(...).pass_rate`, the reward.

Isolation (sandboxing/confine.py's table): root gets namespaces and a uid of the run's own; an
ordinary user gets the same namespaces inside a user namespace of the run's own, with no
capability. Where the kernel allows neither, runs are refused (a sandbox_error that says why and
what to do) unless allow_unsafe() (--unsafe-sandbox): then they run with what is left, marked unsafe.

One run (`run_program`):

    parent (this file, sandboxing/launch.py)    child: `python -I -S`, fresh for every program
    root: lease a uid of our own; a memory
      cgroup for the run, or the watchdog
    plan the tests (kinds.plan_tests): value,
      statement or I/O; keep every expected
      value and output here
    spawn; the child's code, job and token on   first: join the run's cgroup; pid 1 of new
      stdin, the judge's key on a pipe of its   pid/network/IPC/mount namespaces (and user, not
      own                         ----------->  root): the filesystem read-only, private tmpfs
                                                mounts, rlimits, no privilege left (no cgroup:
                                                the seccomp filter too);
                                                fork the JUDGE (statement tests) before any
                                                program code runs; stdio -> /dev/null, a capped file
                                                function tests: the program once, then each value
                                                  test in a fresh namespace; the judge runs each
                                                  statement test, calling the program's functions
                                                  through a pipe (plain data both ways)
                                                I/O tests: per test, fork the warm runner: stdin =
                                                  the input, stdout = a capped file, then exec
    read `TOKEN ...` report lines, judge each   <--  one report per test, then the end marker(s)
      (every 50 ms: the OOM-kill count, or the
      watchdog's sum, against the budget)
      value / output as it arrives
    kill pid 1 (the kernel takes all of its namespace along); reap; release the uid

Truth. A test counts only when its own report came back with the right token: exit code 0
proves nothing, and `sys.exit(0)`, `os._exit(0)` or a dead interpreter lose the tests they
skipped. Value tests (`assert f(x) == LITERAL`, and a HumanEval check made only of such lines:
one value test `(f(a), f(b)) == (x, y)`) and I/O tests are compared HERE with expected values
the child never sees. Statement tests are judged in the judge process, whose token the
program's process never holds (it is sealed in the job; the key travels on a pipe only the judge
reads) and whose memory it cannot read (non-dumpable). A program that finds the runner's report
function (gc.get_objects(), the stack) or its token passes nothing by it (tests/sandboxing/test_sandbox_forgery.py).

Per-test timing (Result.test_cpu_s / test_wall_s / test_mem_mb): the test's own execution only,
not the interpreter's start nor the program's top level. Function tests: getrusage and the
peak RSS (VmHWM, reset before each test through /proc/self/clear_refs) of the program's process;
I/O tests: wait4 of the test's forked process, less what it held when it was forked. With
namespaces the CPU of every process the test started counts too (read from the run's own /proc
before they are killed, after each test): work handed to a child is neither free nor over the
limit unseen -- a test whose CPU with its children's passes timeout_s is a timeout. test_mem_mb
is per process; Result.run_peak_mb is the whole run's (its cgroup's peak, else the watchdog's).
These per-test figures are the program's process's word (it can work at import time, or send a
timing of its own first): a diagnostic only. What ranks programs by cost is Result.cost_s / cost_mb
(run_program(cost=True), sandboxing/cost.py): the whole run's CPU and memory peak measured by us,
outside the run, less an empty program's on the same tests.

Limits (each documented where it is set):
    CPU         each test, and the program's own top level, gets timeout_s CPU seconds (a timer
                that raises in the test): 9 passing tests and 1 endless one give 9/10, "timeout".
                Code that swallows that meets RLIMIT_CPU = timeout_s x (tests + 1) + STARTUP_S;
                an I/O test's process meets its own RLIMIT_CPU of ceil(timeout_s) + 1.
    wall        WALL_FACTOR x the CPU budget, per test and per run: a sleeping or blocked program.
    memory      RLIMIT_AS = the address space the program starts with (~13 MiB) + memory_mb, per
                process; and all of the run's processes and files together: --sandbox-memory
                (sandboxing/memory.py: a cgroup, guaranteed, else seccomp + a watchdog, best
                effort). Over it: the whole run is killed, every test "memory".
    output      stdout + stderr, and each file written: OUTPUT_MB (an I/O test: its stdout).
                What we read back: REPORT_MB, plus each I/O test's output (judged on arrival).
    processes   MAX_PROCS (16 without a cgroup), threads included: RLIMIT_NPROC counts per uid, and root ignores it,
                hence a uid of the run's own; in a user namespace it counts uid 0 of that
                namespace, i.e. the run alone (Linux 5.14+ counts it per user namespace).
"""
import dataclasses
import functools
import os
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from sandboxing import bombs, check, judge, kinds, launch, memory, process, special_checker
from sandboxing import cost as costs
from sandboxing.confine import SAFE
from sandboxing.judge import VERDICTS  # noqa: F401  (re-exported: sandbox.VERDICTS)
from sandboxing.process import UNSHARE, UNSHARE_USER

MEMORY_MB = 1024  # address space on top of a fresh interpreter's (~13 MiB): `import numpy` maps ~90 MiB
#                   of it, each thread 8 MiB of stack and at most one 64 MiB malloc arena
OUTPUT_MB = 8  # stdout + stderr, and each file the program writes
REPORT_MB = 16  # the most we read back from one run besides I/O outputs; with judge.MAX_ITEMS, our memory
MAX_PROCS = 32  # processes + threads of one run (a fork bomb stops here)
WALL_FACTOR = 3  # wall seconds allowed per CPU second, for a busy machine
STARTUP_S = 0.5  # CPU seconds for the interpreter's start and imports (~0.02 s; numpy ~0.15 s)
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
UNSAFE = False  # allow_unsafe(): where no namespace can be made, run anyway with what is left
NO_NAMESPACES = "CORE_CODE_SANDBOX_NO_NAMESPACES"  # =1 in the environment: act as if no namespace could be made
#                                                   and no Landlock applied: neither tier isolates (tests of the refusal)
LEFT = {"uid": "a uid of their own, rlimits and a temp dir, but no pid, network or mount isolation",
        "none": "rlimits, a process group and a temp dir only: no uid, pid, network or filesystem isolation"}


@dataclass(frozen=True)
class Isolation:
    """What isolation() found: the mode runs use (sandboxing/confine.py's table) and, where it has no
    namespaces, why none could be made."""
    mode: str  # root | user | landlock | uid | none
    missing: str = ""  # e.g. "user: unshare: unshare failed: Operation not permitted"; "" with namespaces

    @property
    def isolated(self) -> bool:
        return self.mode in SAFE

    def refusal(self) -> str:
        """The one line that refuses to run generated programs without isolation, with the ways out."""
        root = ("give the container CAP_SYS_ADMIN or let it make user namespaces (docker: --security-opt "
                "seccomp=unconfined)" if os.geteuid() == 0 else "run as root")
        return (f"sandbox: cannot isolate generated programs on this machine ({self.missing}). Allow unprivileged "
                f"user namespaces (Ubuntu 24.04: sysctl -w kernel.apparmor_restrict_unprivileged_userns=0; "
                f"elsewhere user.max_user_namespaces > 0), {root}, or allow Landlock (Linux 5.13+; a seccomp profile "
                f"that lets landlock_* through, as podman's does), or pass --unsafe-sandbox to run them with "
                f"{LEFT[self.mode]}")


def allow_unsafe(allowed: bool = True) -> None:
    """--unsafe-sandbox: where isolation() finds no namespaces, run programs anyway (every Result
    then says unsafe=True). Without it such runs are refused (sandbox_error, Isolation.refusal)."""
    global UNSAFE
    UNSAFE = allowed


_choosing = threading.Lock()


def isolation() -> Isolation:
    """The strongest mode that works here, found once per process by running a known program in
    each: `root` (root with CAP_SYS_ADMIN), then `user` (a user namespace), then `landlock` (Landlock +
    seccomp, no namespace); else `uid` (root) or `none`, with the reasons. Our choice: a real run is the
    test, since each way a kernel refuses (sysctls, AppArmor, seccomp, a missing `unshare`, a kernel
    without Landlock, an interpreter a leased uid cannot read) shows up there."""
    with _choosing:
        return _isolation()


@functools.cache
def _isolation():
    tried = []
    if os.environ.get(NO_NAMESPACES) == "1":
        tried.append(f"namespaces switched off by {NO_NAMESPACES}=1, the Landlock tier too")
        return Isolation("uid" if os.geteuid() == 0 else "none", "; ".join(tried))
    else:
        for mode in ("root", "user") if os.geteuid() == 0 else ("user",):
            r = run_program("def f(x):\n    return 2 * x\n", ["assert f(2) == 4"], timeout_s=2.0, mode=mode)
            if r.verdict == "passed":
                return Isolation(mode)
            tried.append(f"{mode}: {_refused(mode, r)}")
    # The program imports a module no run has loaded yet: as root, the leased uid must be able to read the
    # interpreter's library (not so under /root's 0700 home), or every program that imports would fail.
    r = run_program("import json\n\ndef f(x):\n    return json.loads(str(2 * x))\n", ["assert f(2) == 4"],
                    timeout_s=2.0, mode="landlock")
    if r.verdict == "passed":
        return Isolation("landlock", "; ".join(tried))
    tried.append(f"landlock: {_refused('landlock', r)}")
    return Isolation("uid" if os.geteuid() == 0 else "none", "; ".join(tried))


def _refused(mode, result):
    """Why `mode` failed: what `unshare` says when it cannot make the namespaces, else the run's detail."""
    command = {"root": UNSHARE, "user": UNSHARE_USER}.get(mode)
    if mode == "landlock" and os.geteuid() == 0 and not process.others_may_read(sys.base_prefix):
        return f"the interpreter ({sys.base_prefix}) is closed to the run's leased uid: use a python that others may read"
    if not command:
        return f"{result.verdict}: {result.detail}"[:200]
    try:
        bare = subprocess.run(command + ["--mount", "true"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return f"{command[0]}: {e}"
    lines = bare.stderr.strip().splitlines()
    return lines[-1][:200] if bare.returncode and lines else f"{result.verdict}: {result.detail}"[:200]


@dataclass(frozen=True)
class Result:
    verdict: str  # one of VERDICTS
    passed: int  # tests that passed
    total: int  # len(tests) + len(io_tests)
    cpu_s: float  # CPU seconds of the child and all it started (user + sys), measured out of its reach (cost.py)
    wall_s: float  # wall seconds of the run
    peak_rss_mb: float  # peak resident memory of the program's process(es), MiB
    detail: str = ""  # "ZeroDivisionError: division by zero", "test 3 failed: assert f(2) == 4 (got 5)"
    tests: tuple = ()  # one verdict per test: ("passed", "passed", "failed", "timeout")
    test_cpu_s: tuple = ()  # per test: CPU s of its own execution (None: it never ran)
    test_wall_s: tuple = ()  # per test: wall s of the same
    test_mem_mb: tuple = ()  # per test: peak RSS above what the process held just before it, MiB
    unsafe: bool = False  # True: run without namespaces (--unsafe-sandbox; isolation().mode uid or none)
    coverage: tuple | None = None  # coverage=True: the program's lines that ran, as its process reported them
    #                                (data for a loss mask, never a verdict); None: not asked, or no report
    run_peak_mb: float = 0.0  # the run's memory peak, all its processes and files (cgroup; else the watchdog's), MiB
    outside_mb: float = 0.0  # the run's memory peak measured out of its reach (sandboxing/cost.py), MiB
    cost_s: float | None = None  # cost=True: the program's CPU s from outside, the empty program's subtracted (cost.py)
    cost_mb: float | None = None  # cost=True: its memory peak from outside, MiB, the empty program's subtracted
    fixed: tuple | None = None  # cost=True: (CPU s, MiB) of the empty program, the fixed cost subtracted above

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "pass_rate": self.pass_rate}


def not_run(verdict: str, n: int, detail: str, unsafe: bool = False) -> "Result":
    """The Result of a program that never ran: each of its n tests gets `verdict` (no_code: nothing to run;
    sandbox_error: the sandbox refused or failed), 0 passed, no time or memory spent."""
    return Result(verdict, 0, n, 0.0, 0.0, 0.0, detail, (verdict,) * n, (None,) * n, (None,) * n, (None,) * n, unsafe)


def run_program(program: str | None, tests=(), *, io_tests=(), setup: str = "", timeout_s: float = 4.0,
                memory_mb: int = MEMORY_MB, mode: str | None = None, checker: str = "strict",
                checker_program: str | None = None, coverage: bool = False, cost: bool = False) -> Result:
    """Run `program` against function tests (`setup`, then each test statement) or I/O tests
    ((stdin, expected stdout), ...), in a fresh sandboxed interpreter.

    timeout_s: CPU seconds for each test, and for the program's own top level; the whole run is
    capped at timeout_s x (tests + 1) + STARTUP_S. memory_mb: see MEMORY_MB. Never raises for
    anything the program does; ValueError for a problem with both kinds of tests, or an I/O test
    that is not an (input, output) pair of strings, or an unknown checker. checker: the I/O tests'
    rule (checkers.RULES); checker_program: the problem's own checker (sandboxing/special_checker.py).
    coverage: function tests run traced (sys.settrace, the program's process's main thread) and
    Result.coverage holds the line numbers of the program that ran (StepCoder's FGO); tracing costs the
    program CPU time, so verdicts of such a run are best not used as rewards. I/O tests: no coverage.
    cost: also Result.cost_s / cost_mb, the program's cost measured out of its reach less the fixed cost
    of an empty program on the same tests (sandboxing/cost.py; the first run of a job measures that fixed
    cost, cost.FIXED_RUNS more runs); what ranks programs by speed or memory reads these, nothing else.
    >>> run_program("def f(x):\\n    return 2 * x", ["assert f(2) == 4", "assert f(3) == 5"]).tests
    ('passed', 'failed')
    >>> run_program("print(sum(map(int, input().split())))", io_tests=[("1 2\\n", "3\\n")]).verdict
    'passed'
    """
    tests, io_tests = list(tests), list(io_tests)
    for i, pair in enumerate(io_tests):
        if not (isinstance(pair, (tuple, list)) and len(pair) == 2 and all(isinstance(s, str) for s in pair)):
            raise ValueError(f"io_tests[{i}]: expected (input, output) strings, got {pair!r:.80}")
    n = len(tests) + len(io_tests)
    if tests and io_tests:
        raise ValueError("a problem has function tests or I/O tests, not both")
    if program is None or not program.strip():
        return not_run("no_code", n, "no program")
    if mode is None:
        chosen = isolation()
        if not chosen.isolated and not UNSAFE:
            return not_run("sandbox_error", n, chosen.refusal())
        mode = chosen.mode
    unsafe = mode not in SAFE
    plans = kinds.plan_tests(program, tests, io_tests, setup)
    limits = dict(wall_factor=WALL_FACTOR, startup_s=STARTUP_S, output_mb=OUTPUT_MB, max_procs=MAX_PROCS)
    job, tokens, key, cpu_limit = launch.prepare(program, plans, setup, timeout_s, memory_mb, mode, limits)
    job["coverage"] = coverage and not io_tests
    reports = judge.Reports(plans, tokens, checker, keep=checker_program is not None)
    limit = (REPORT_MB << 20) + len(io_tests) * (2 * (OUTPUT_MB << 20) + (1 << 16))
    ran = launch.run(job, key, reports.feed, limit, WALL_FACTOR * cpu_limit, ENV)
    wall_s = ran.wall_s
    if ran.error:
        return not_run("sandbox_error", n, ran.error, unsafe)
    if ran.memory:  # over the run's budget: killed whole, every test lost (sandboxing/memory.py)
        return Result("memory", 0, n, round(ran.cpu_s, 4), round(wall_s, 4), 0.0, ran.memory, ("memory",) * n,
                      (None,) * n, (None,) * n, (None,) * n, unsafe, None, ran.peak_mb)
    ended = process.end_reason(ran.status, ran.cut, ran.cpu_s, cpu_limit, WALL_FACTOR * cpu_limit, limit >> 20,
                               OUTPUT_MB)
    try:  # the reports are the program's words: whatever they hold, no exception leaves here
        # (docs/sandbox.md#h5-malformed-report-fields)
        if reports.kept:  # the problem's own checker program judges what the program printed
            run = functools.partial(run_program, mode=mode)  # the checker runs as the program ran
            reports.settle(special_checker.verdicts(checker_program, reports.kept, run))
        verdict, per_test, detail, timing = judge.judge(tests, plans, reports, ended, "judge" if "judge" in tokens else None)
        peak_mb = max((peak for sender, peak, _ in reports.messages if sender == "program"), default=0) / 1024
        cpu, wall, mem = (tuple(column) for column in zip(*timing)) if timing else ((), (), ())
        lines = next((m[1] for sender, _, m in reversed(reports.messages) if sender == "program"
                      and m[0] == "coverage" and len(m) == 2), None) if coverage else None
        lines = tuple(sorted({x for x in lines if type(x) is int and 0 < x < 1 << 30})) \
            if type(lines) in (list, tuple) else None  # the program's words: plain ints or nothing
        result = Result(verdict, per_test.count("passed"), n, round(ran.outside_s, 4), round(wall_s, 4),
                        round(peak_mb, 1), detail, per_test, cpu, wall, mem, unsafe, lines, ran.peak_mb,
                        round(ran.outside_mb, 1))
        if not cost:
            return result
        fixed = costs.fixed(costs.key(program, tests, io_tests, setup, timeout_s, memory_mb, mode, memory.budget_mb(),
                                      memory.mechanism()),
                            lambda: _empty_run(program, tests, io_tests, setup, timeout_s, memory_mb, mode))
        cost_s, cost_mb = costs.net((ran.outside_s, ran.outside_mb), fixed)
        return dataclasses.replace(result, cost_s=cost_s, cost_mb=cost_mb, fixed=fixed)
    except Exception as e:  # a defect of ours, met through a report no test foresaw
        return not_run("sandbox_error", n, f"sandbox: judging the reports: {type(e).__name__}: {e}"[:300], unsafe)


def _empty_run(program, tests, io_tests, setup, timeout_s, memory_mb, mode):
    """(CPU s, peak MiB) from outside of the empty program that stands for `program` (cost.stub) on its tests."""
    r = run_program(costs.stub(program), tests, io_tests=io_tests, setup=setup, timeout_s=timeout_s,
                    memory_mb=memory_mb, mode=mode)
    return r.cpu_s, r.outside_mb


def run_many(jobs: list[dict], workers: int | None = None, progress: bool = False,
             coverage: bool = False, cost: bool = False) -> list[Result]:
    """run_program(**job) for every job, `workers` at a time (default: one per CPU core); results
    in input order. Threads suffice: each one waits on its own child process. coverage, cost: see run_program
    (a job's own "cost" key wins over `cost`)."""
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        results = pool.map(lambda job: run_program(**{"cost": cost, **job}, coverage=coverage), jobs)
        if progress:
            from tqdm import tqdm
            results = tqdm(results, total=len(jobs), desc="sandbox")
        return list(results)


def self_check() -> None:
    """Call at start: a known-right and a known-wrong program must come back passed and failed,
    else raise -- do not train against a broken reward."""
    program = "import collections\n\ndef add(a, b):\n    return a {} b\n"
    tests = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0", "assert add(2, 2) in (4,)"]
    io = "a, b = map(int, input().split())\nprint(a {} b)\n"
    io_tests = [("1 2\n", "3\n"), ("-1 1", "0")]
    for kind, right, wrong in (
            ("function", run_program(program.format("+"), tests), run_program(program.format("-"), tests)),
            ("I/O", run_program(io.format("+"), io_tests=io_tests), run_program(io.format("-"), io_tests=io_tests))):
        if right.verdict != "passed" or wrong.verdict != "failed":
            raise RuntimeError(f"sandbox self-check failed: the right {kind} program came back {right.verdict} "
                               f"({right.detail}), the wrong one {wrong.verdict} ({wrong.detail})")


class SandboxError(Exception):
    """No isolation here and no --unsafe-sandbox: the one-line refusal (Isolation.refusal)."""


def require(unsafe: bool, show: bool = True, memory_mb: int | None = None) -> dict:
    """train.py / eval.py at start: refuse in one line (SandboxError) where runs would have no
    namespaces and `unsafe` (--unsafe-sandbox) is False, else allow them; set the run's memory budget
    (--sandbox-memory, MiB; ValueError below 64); print one line of what is in force (`show`), the
    memory bound included; return what config.json / results.json record."""
    chosen = isolation()
    if not chosen.isolated:
        if not unsafe:
            raise SandboxError(chosen.refusal())
        allow_unsafe()
    if memory_mb is not None:
        memory.set_budget(memory_mb)
    held = check.guarantees(run_program, chosen.mode, memory.max_procs(MAX_PROCS))
    if show:
        print(f"sandbox: {check.describe(chosen.mode)}: " + ", ".join(
            f"{k} {'yes' if v else 'no'}" for k, (v, _) in held.items())
              + ("" if chosen.isolated else " (--unsafe-sandbox: every verdict is marked unsafe)")
              + f"; {memory.describe(MEMORY_MB, chosen.mode == 'landlock')}", flush=True)
    return {"mode": chosen.mode, "unsafe": not chosen.isolated, "missing": chosen.missing,
            "guarantees": {k: v for k, (v, _) in held.items()},
            "memory": {"mechanism": memory.mechanism(), "budget_mb": memory.budget_mb(),
                       "guaranteed": memory.guaranteed()}}


if __name__ == "__main__":  # python sandbox.py --check [--deep]: what is in force here, one line per guarantee
    if sys.argv[1:] not in (["--check"], ["--check", "--deep"]):
        sys.exit("usage: python sandbox.py --check [--deep]")
    chosen = isolation()
    print("\n".join(check.report(chosen, check.guarantees(run_program, chosen.mode, memory.max_procs(MAX_PROCS)))))
    print(memory.describe(MEMORY_MB, chosen.mode == "landlock"))
    held = True
    if "--deep" in sys.argv:  # each hostile memory program against a small budget: all must be stopped
        memory.set_budget(bombs.DEEP_BUDGET_MB)
        found = bombs.deep_check(run_program, "cgroup" if memory.guaranteed() else "watchdog")
        print(f"memory, {bombs.DEEP_BUDGET_MB} MiB a run: " + ", ".join(
            f"{name} {'held' if ok else 'GOT THROUGH'} ({verdict})" for name, ok, verdict in found))
        held = all(ok for _, ok, _ in found)
    sys.exit(0 if chosen.isolated and held else 1)
