"""Run an untrusted program against its tests and tell the truth about the result.

The reward of a generated program is its pass rate here, so this file decides what GRPO learns:
if a program can make itself look correct, the policy learns to cheat; if a run hangs or leaks
processes, training dies at step 3,000. Four files, one idea each:

    sandbox.py          this file: what a run is -- the job, the limits, the Result
    sandbox_process.py  process control and isolation on our side: uid lease, spawn, read, kill
    sandbox_runner.py   the child: isolation on its side, the program, the tests, the reports
    judge.py            what each test is and its verdict, judged where the program cannot reach

One run (`run_program`):

    parent (this file)                          child: `python -I -S`, fresh for every program
    lease a uid of our own (root)
    plan the tests (judge.plan_tests): value,
      statement or I/O; keep every expected
      value and output here
    spawn; job + token on stdin, the judge's    pid 1 of new pid/network/IPC/mount namespaces:
      key on a pipe of its own    ----------->  private tmpfs mounts, rlimits, drop to the uid;
                                                fork the JUDGE (statement tests) before any
                                                program code runs; stdio -> /dev/null, a capped file
                                                function tests: the program once, then each value
                                                  test in a fresh namespace; the judge runs each
                                                  statement test, calling the program's functions
                                                  through a pipe (plain data both ways)
                                                I/O tests: per test, fork the warm runner: stdin =
                                                  the input, stdout = a capped file, then exec
    read `TOKEN ...` report lines, judge each   <--  one report per test, then the end marker(s)
      value / output as it arrives
    kill pid 1 (the kernel takes all of its namespace along); reap; release the uid

Truth. A test counts only when its own report came back with the right token: exit code 0
proves nothing, and `sys.exit(0)`, `os._exit(0)` or a dead interpreter lose the tests they
skipped. Value tests (`assert f(x) == LITERAL`, and a HumanEval check made only of such lines:
one value test `(f(a), f(b)) == (x, y)`) and I/O tests are compared HERE with expected values
the child never sees. Statement tests are judged in the judge process, whose token the
program's process never holds (it is sealed in the job; the key travels on a pipe only the judge
reads) and whose memory it cannot read (non-dumpable). A program that finds the runner's report
function (gc.get_objects(), the stack) or its token passes nothing by it (tests/test_sandbox_forgery.py).

Per-test timing (Result.test_cpu_s / test_wall_s / test_mem_mb): the test's own execution only,
not the interpreter's start nor the program's top level. Function tests: getrusage and the
peak RSS (VmHWM, reset before each test through /proc/self/clear_refs) of the program's process;
I/O tests: wait4 of the test's forked process, less what it held when it was forked.

Limits (each documented where it is set):
    CPU         each test, and the program's own top level, gets timeout_s CPU seconds (a timer
                that raises in the test): 9 passing tests and 1 endless one give 9/10, "timeout".
                Code that swallows that meets RLIMIT_CPU = timeout_s x (tests + 1) + STARTUP_S;
                an I/O test's process meets its own RLIMIT_CPU of ceil(timeout_s) + 1.
    wall        WALL_FACTOR x the CPU budget, per test and per run: a sleeping or blocked program.
    memory      RLIMIT_AS = the address space the program starts with (~13 MiB) + memory_mb.
    output      stdout + stderr, and each file written: OUTPUT_MB (an I/O test: its stdout).
                What we read back: REPORT_MB, plus each I/O test's output (judged on arrival).
    processes   MAX_PROCS, threads included: RLIMIT_NPROC counts per uid, and root ignores it,
                hence a uid of the run's own.
"""
import contextlib
import functools
import hashlib
import marshal
import math
import os
import secrets
import subprocess
import sys
import time
import ast
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

import judge
import sandbox_process
from judge import VERDICTS, _plan  # noqa: F401  (re-exported: sandbox._plan, sandbox.VERDICTS)
from sandbox_process import HERE, UID_BASE, UID_COUNT, UNSHARE  # noqa: F401  (re-exported)

MEMORY_MB = 1024  # address space on top of a fresh interpreter's (~13 MiB): `import numpy` maps ~90 MiB
#                   of it, each thread 8 MiB of stack and at most one 64 MiB malloc arena
OUTPUT_MB = 8  # stdout + stderr, and each file the program writes
REPORT_MB = 16  # the most we read back from one run besides I/O outputs; bounds our memory
MAX_PROCS = 32  # processes + threads of one run (a fork bomb stops here)
WALL_FACTOR = 3  # wall seconds allowed per CPU second, for a busy machine
STARTUP_S = 0.5  # CPU seconds for the interpreter's start and imports (~0.02 s; numpy ~0.15 s)
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


@dataclass(frozen=True)
class Result:
    verdict: str  # one of VERDICTS
    passed: int  # tests that passed
    total: int  # len(tests) + len(io_tests)
    cpu_s: float  # CPU seconds of the child and all it started (user + sys)
    wall_s: float  # wall seconds of the run
    peak_rss_mb: float  # peak resident memory of the program's process(es), MiB
    detail: str = ""  # "ZeroDivisionError: division by zero", "test 3 failed: assert f(2) == 4 (got 5)"
    tests: tuple = ()  # one verdict per test: ("passed", "passed", "failed", "timeout")
    test_cpu_s: tuple = ()  # per test: CPU s of its own execution (None: it never ran)
    test_wall_s: tuple = ()  # per test: wall s of the same
    test_mem_mb: tuple = ()  # per test: peak RSS above what the process held just before it, MiB

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "pass_rate": self.pass_rate}


def _failed_all(verdict, n, detail):
    return Result(verdict, 0, n, 0.0, 0.0, 0.0, detail, (verdict,) * n, (None,) * n, (None,) * n, (None,) * n)


def run_program(program: str | None, tests=(), *, io_tests=(), setup: str = "", timeout_s: float = 4.0,
                memory_mb: int = MEMORY_MB) -> Result:
    """Run `program` against function tests (`setup`, then each test statement) or I/O tests
    ((stdin, expected stdout), ...), in a fresh sandboxed interpreter.

    timeout_s: CPU seconds for each test, and for the program's own top level; the whole run is
    capped at timeout_s x (tests + 1) + STARTUP_S. memory_mb: see MEMORY_MB. Never raises for
    anything the program does; ValueError for a problem with both kinds of tests, or an I/O test
    that is not an (input, output) pair of strings.
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
        return _failed_all("no_code", n, "no program")
    plans = judge.plan_tests(program, tests, io_tests, setup)
    statements = [(i, src) for i, (kind, src, _) in enumerate(plans) if kind == "statement"]
    values = tuple(src for kind, src, _ in plans if kind == "value")  # "check" values need no setup
    tokens = {"program": secrets.token_hex(16)}
    key = secrets.token_bytes(32)
    sealed = None
    if statements:
        tokens["judge"] = secrets.token_hex(16)
        sealed = _seal(marshal.dumps(dict(token=tokens["judge"], setup=setup, tests=statements, timeout_s=timeout_s,
                                          wall_s=WALL_FACTOR * timeout_s,
                                          modules=_modules(setup, tuple(src for _, src in statements), keep_sys=True))), key)
    cpu_limit = math.ceil(timeout_s * (n + 1) + STARTUP_S)
    job = dict(program=program, setup=setup if values else "",
               tests=[("value", src) if kind in ("value", "check") else (kind, None) for kind, src, _ in plans
                      if kind != "io"],
               modules=_modules(setup, values) if values else [],
               inputs=[given.encode() for kind, given, _ in plans if kind == "io"],
               judge=sealed, key_fd=None,
               token=tokens["program"], timeout_s=timeout_s, wall_s=WALL_FACTOR * timeout_s,
               cpu_limit_s=cpu_limit, memory_mb=memory_mb, output_bytes=OUTPUT_MB << 20,
               max_procs=MAX_PROCS, site_dirs=sandbox_process.SITE_DIRS, uid=None, expose=[], hide=[], hide_files=[])
    reports = judge.Reports(plans, tokens)
    limit = (REPORT_MB << 20) + len(io_tests) * (2 * (OUTPUT_MB << 20) + (1 << 16))
    start, cut = time.monotonic(), "deadline"
    with sandbox_process.own_uid() as uid, sandbox_process.workdir(uid) as workdir:
        if uid is not None:
            job.update(uid=uid, expose=sandbox_process.hidden_interpreter(), hide=sandbox_process.hidden_answers(), hide_files=sandbox_process.hidden_files())
        command = (UNSHARE if uid is not None else []) + [sys.executable, "-I", "-S", "-c", sandbox_process.BOOT]
        key_read, key_write = os.pipe()  # the judge's key: the one thing the program's process never reads
        job["key_fd"] = key_read  # pass_fds keeps the number
        try:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=ENV, cwd=workdir, start_new_session=True,
                                    pass_fds=(key_read,))
        except OSError as e:
            os.close(key_write)
            return _failed_all("sandbox_error", n, f"spawn: {e}")
        finally:
            os.close(key_read)
        try:
            with contextlib.suppress(BrokenPipeError):
                os.write(key_write, key)  # 32 bytes: fits the pipe, never blocks
            os.close(key_write)
            key_write = None
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(marshal.dumps(job))
                proc.stdin.close()
            cut = sandbox_process.read_until_exit(proc, start + WALL_FACTOR * cpu_limit, reports.feed, limit)
        finally:
            if key_write is not None:
                os.close(key_write)
            sandbox_process.kill_run(proc, uid, exited=cut is None)  # before reaping: its pid stays ours till then
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            proc.stdout.close()
    cpu_s = usage.ru_utime + usage.ru_stime
    ended = sandbox_process.end_reason(status, cut, cpu_s, cpu_limit, WALL_FACTOR * cpu_limit, limit >> 20, OUTPUT_MB)
    try:  # the reports are the program's words: whatever they hold, no exception leaves here (H5)
        verdict, per_test, detail, timing = judge.judge(tests, plans, reports, ended, "judge" if statements else None)
        peak_mb = max((peak for sender, peak, _ in reports.messages if sender == "program"), default=0) / 1024
        cpu, wall, mem = (tuple(column) for column in zip(*timing)) if timing else ((), (), ())
        return Result(verdict, per_test.count("passed"), n, round(cpu_s, 4), round(time.monotonic() - start, 4),
                      round(peak_mb, 1), detail, per_test, cpu, wall, mem)
    except Exception as e:  # a defect of ours, met through a report no test foresaw
        return _failed_all("sandbox_error", n, f"sandbox: judging the reports: {type(e).__name__}: {e}"[:300])


def _seal(data: bytes, key: bytes) -> bytes:
    """data XOR a SHAKE-256 keystream of `key` (a one-time pad: one key per run, never reused):
    the program's process carries the judge's job but cannot read it without the key."""
    pad = hashlib.shake_256(key).digest(len(data))
    return (int.from_bytes(data, "little") ^ int.from_bytes(pad, "little")).to_bytes(len(data), "little")


@functools.lru_cache(maxsize=4096)
def _modules(setup, expressions, keep_sys=False):
    """Modules that the setup and tests import or name (math in `math.floor(f(1))`). The program's
    process imports them before the program runs and restores them before every value test; the
    judge process puts them in each statement test's namespace (`sys` too: MBPP 596's tests use
    sys.getsizeof with the `sys` the program imported)."""
    names = set()
    for source in (setup, *expressions):
        with contextlib.suppress(Exception):
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module)
                elif isinstance(node, ast.Name) and node.id in sys.stdlib_module_names:
                    names.add(node.id)
    return sorted(names - ({"builtins"} if keep_sys else {"sys", "builtins"}))


def run_many(jobs: list[dict], workers: int | None = None, progress: bool = False) -> list[Result]:
    """run_program(**job) for every job, `workers` at a time (default: one per CPU core); results
    in input order. Threads suffice: each one waits on its own child process."""
    with ThreadPoolExecutor(max_workers=workers or os.cpu_count()) as pool:
        results = pool.map(lambda job: run_program(**job), jobs)
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
