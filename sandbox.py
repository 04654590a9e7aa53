"""Run an untrusted program against unit tests and tell the truth about the result.

The reward of a generated program is its pass rate here, so this file decides what GRPO learns:
if a program can make itself look correct, the policy learns to cheat; if a run hangs or leaks
processes, training dies at step 3,000.

One run (`run_program`); the child half is sandbox_runner.py:

    parent (this file)                          child: `python -I -S`, fresh for every program
    lease a uid of our own (root)
    split the tests: of `assert EXPR == LITERAL`
      send only EXPR, keep LITERAL here
    spawn; job + random token on stdin  ----->  pid 1 of new pid/network/IPC/mount namespaces:
                                                private tmpfs mounts, rlimits, drop to the uid
                                                stdin </dev/null; stdout+stderr -> capped file
                                                the program, then each test in a fresh namespace
    read `TOKEN ...` report lines       <-----  one report per test, then the end marker
    judge each EXPR's value against its LITERAL
    kill pid 1 (the kernel takes all of its namespace along); reap; release the uid

Truth. A test counts only when its own report, carrying the run's random token, came back: exit
code 0 proves nothing, and `sys.exit(0)`, `os._exit(0)` or a dead interpreter lose the tests
they skipped. `assert EXPR == LITERAL` tests (MBPP's kind) are judged HERE: the child sends EXPR's
value as marshal data, which only builtin types survive (not an always-equal object), and never
sees LITERAL. Other statements (HumanEval's `check(f)`) run in the child, with the builtins and
the modules they use as they were before the program ran, a fresh namespace per test, and what
the program's functions return rebuilt from plain data; a program that rewrites the runner
through the stack is caught after the test. What one process cannot stop: a program that digs
the token out of the runner's memory and forges statement-test reports. Value tests are immune.

Limits (each documented where it is set):
    CPU         each test, and the program's own top level, gets timeout_s CPU seconds (a timer
                that raises in the test): 9 passing tests and 1 endless one give 9/10, "timeout".
                Code that swallows that meets RLIMIT_CPU = timeout_s x (tests + 1) + STARTUP_S.
    wall        WALL_FACTOR x the CPU budget, per test and per run: a sleeping or blocked program.
    memory      RLIMIT_AS = a fresh interpreter's own address space (~13 MiB) + memory_mb.
    output      stdout + stderr, and each file written: OUTPUT_MB. What we read back: REPORT_MB.
    processes   MAX_PROCS, threads included: RLIMIT_NPROC counts per uid, and root ignores it,
                hence a uid of the run's own.
Isolation, as root (`unshare` from util-linux must exist): a uid leased to this run alone
(UID_BASE...), which can write and signal nothing of ours; a pid namespace whose pid 1 is the
runner, so that when it dies the kernel kills and reaps whatever the program started, setsid()
or not; no network (an empty network namespace, not even loopback); private tmpfs over /tmp
(the working dir), /var/tmp and /dev/shm, and over a 0700 home holding the interpreter, which
stays visible alone; its own /proc; an empty environment but three thread caps; no_new_privs.
Not root: the same rlimits but no process limit, no namespaces, the process group killed at the
end -- a grandchild that calls setsid() survives. Linux only.
"""
import ast
import contextlib
import fcntl
import functools
import itertools
import marshal
import math
import os
import pwd
import reprlib
import secrets
import select
import shutil
import signal
import site
import stat
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass

from sandbox_runner import TMP_DIRS

VERDICTS = ("passed", "failed", "error", "timeout", "memory", "output_limit", "no_code", "sandbox_error")
MEMORY_MB = 1024  # address space on top of a fresh interpreter's (~13 MiB): `import numpy` maps ~90 MiB
#                   of it, each thread 8 MiB of stack and at most one 64 MiB malloc arena
OUTPUT_MB = 8  # stdout + stderr, and each file the program writes
REPORT_MB = 16  # the most we read back from one run (reports, returned values); bounds our memory
MAX_PROCS = 32  # processes + threads of one run (a fork bomb stops here)
WALL_FACTOR = 3  # wall seconds allowed per CPU second, for a busy machine
STARTUP_S = 0.5  # CPU seconds for the interpreter's start and imports (~0.02 s; numpy ~0.15 s)
UID_BASE, UID_COUNT = 60000, 256  # uids leased to runs when we are root (real accounts skipped)
LOCK_DIR = "/run/lock/coresandbox"  # one lock file per uid: who holds it runs as that uid
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
HERE = os.path.dirname(os.path.abspath(__file__))
SITE_DIRS = site.getsitepackages()  # the child runs without `site`: it adds these itself
# Root: the child runs as pid 1 of new pid, network and IPC namespaces; it adds a mount namespace
# of its own (sandbox_runner.private_mounts). When pid 1 dies, the kernel kills the namespace.
UNSHARE = [shutil.which("unshare") or "/usr/bin/unshare", "--pid", "--fork", "--kill-child", "--net", "--ipc"]
# ...and imports sandbox_runner from here (a -c line: the module's .pyc is cached, a script's is not)
BOOT = f"import sys; sys.path.insert(0, {HERE!r}); import sandbox_runner; sandbox_runner.main()"


@dataclass(frozen=True)
class Result:
    verdict: str  # one of VERDICTS
    passed: int  # tests that passed
    total: int  # len(tests)
    cpu_s: float  # CPU seconds of the child (user + sys)
    wall_s: float  # wall seconds of the run
    peak_rss_mb: float  # peak resident memory of the runner process (VmHWM) at its last report, MiB
    detail: str = ""  # "ZeroDivisionError: division by zero", "test 3 failed: assert f(2) == 4 (got 5)"
    tests: tuple = ()  # one verdict per test: ("passed", "passed", "failed", "timeout")

    @property
    def pass_rate(self) -> float:
        return self.passed / self.total if self.total else 0.0

    def to_dict(self) -> dict:
        return {**asdict(self), "pass_rate": self.pass_rate}


def run_program(program: str | None, tests: list[str], *, setup: str = "", timeout_s: float = 4.0,
                memory_mb: int = MEMORY_MB) -> Result:
    """Run `program`, then `setup`, then each test statement, in a fresh sandboxed interpreter.

    timeout_s: CPU seconds for each test, and for the program's own top level; the whole run is
    capped at timeout_s x (len(tests) + 1) + STARTUP_S. memory_mb: see MEMORY_MB. Never raises
    for anything the program does.
    >>> run_program("def f(x):\\n    return 2 * x", ["assert f(2) == 4", "assert f(3) == 5"]).tests
    ('passed', 'failed')
    """
    tests = list(tests)
    if program is None or not program.strip():
        return Result("no_code", 0, len(tests), 0.0, 0.0, 0.0, "no program", ("no_code",) * len(tests))
    plans = [_plan(test) for test in tests]
    cpu_limit = math.ceil(timeout_s * (len(tests) + 1) + STARTUP_S)
    statements = tuple(test for test, (kind, _, _) in zip(tests, plans) if kind == "statement")
    job = dict(program=program, setup=setup, tests=[(kind, src) for kind, src, _ in plans],
               modules=_modules(setup, statements),
               token=secrets.token_hex(16), timeout_s=timeout_s, wall_s=WALL_FACTOR * timeout_s,
               cpu_limit_s=cpu_limit, memory_mb=memory_mb, output_bytes=OUTPUT_MB << 20,
               max_procs=MAX_PROCS, site_dirs=SITE_DIRS, uid=None, expose=[])
    start, data, cut = time.monotonic(), b"", "deadline"
    with _own_uid() as uid, _workdir(uid) as workdir:
        if uid is not None:
            job.update(uid=uid, expose=_hidden_interpreter())
        command = (UNSHARE if uid is not None else []) + [sys.executable, "-I", "-S", "-c", BOOT]
        try:
            proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                    stderr=subprocess.STDOUT, env=ENV, cwd=workdir, start_new_session=True)
        except OSError as e:
            return Result("sandbox_error", 0, len(tests), 0.0, 0.0, 0.0, f"spawn: {e}",
                          ("sandbox_error",) * len(tests))
        try:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(marshal.dumps(job))
                proc.stdin.close()
            data, cut = _read_until_exit(proc, start + WALL_FACTOR * cpu_limit)
        finally:
            _kill_run(proc, uid, exited=cut is None)  # before reaping: its pid stays ours till then
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            proc.stdout.close()
    cpu_s = usage.ru_utime + usage.ru_stime
    messages = _messages(data, job["token"])
    ended = _end_reason(status, cut, cpu_s, cpu_limit, WALL_FACTOR * cpu_limit)
    verdict, per_test, detail = _judge(tests, plans, [m for _, m in messages], ended, data)
    peak_mb = max((peak for peak, _ in messages), default=0) / 1024
    return Result(verdict, per_test.count("passed"), len(tests), round(cpu_s, 4),
                  round(time.monotonic() - start, 4), round(peak_mb, 1), detail, per_test)


@functools.lru_cache(maxsize=16384)
def _plan(test):
    """("value", EXPR, LITERAL's value) for `assert EXPR == LITERAL`; else ("statement", test, None).

    >>> _plan("assert f([1, 2]) == (3, 'a')")
    ('value', 'f([1, 2])', (3, 'a'))
    >>> _plan("assert math.isclose(f(1), 2.5)")[0]
    'statement'
    """
    with contextlib.suppress(Exception):
        body = ast.parse(test).body
        if len(body) == 1 and isinstance(body[0], ast.Assert) and isinstance(body[0].test, ast.Compare):
            compare = body[0].test
            if len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq):
                left, right = compare.left, compare.comparators[0]
                for expr, literal in ((left, right), (right, left)):
                    with contextlib.suppress(Exception):
                        expected = ast.literal_eval(literal)
                        return "value", ast.unparse(expr), expected  # (get_source_segment: quadratic)
    return "statement", test, None


@functools.lru_cache(maxsize=4096)
def _modules(setup, statement_tests):
    """Modules that the setup and statement tests import or name (math in `math.isclose(...)`):
    the child imports them before the program runs and restores them before every test."""
    names = set()
    for source in (setup, *statement_tests):
        with contextlib.suppress(Exception):
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module)
                elif isinstance(node, ast.Name) and node.id in sys.stdlib_module_names:
                    names.add(node.id)
    return sorted(names - {"sys", "builtins"})


@functools.cache
def _hidden_interpreter():
    """[(dir the child covers, [dirs to show in it])]: our interpreter's files (and this project,
    for the runner) that lie in a TMP_DIR the child gets a fresh tmpfs over (a venv in /tmp), or
    below a directory other users may not enter (pyenv in /root, 0700): the child shows just those."""
    needed = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, HERE, *SITE_DIRS)}
    hidden = {}
    for path in needed:
        parts = path.split("/")
        for n in range(2, len(parts)):
            ancestor = "/".join(parts[:n])
            if ancestor in TMP_DIRS or not os.stat(ancestor).st_mode & stat.S_IXOTH:
                hidden.setdefault(ancestor, set()).add(path)
                break
    return [(private, sorted(p for p in keep if not any(p.startswith(q + "/") for q in keep)))
            for private, keep in hidden.items()]


_next_uid = itertools.count()
_accounts = functools.cache(lambda: {user.pw_uid for user in pwd.getpwall()})


@contextlib.contextmanager
def _own_uid():
    """A uid no other run uses until we are done (None when we are not root). The lease is an
    flock, so it holds across threads and processes and ends even if we are killed."""
    if os.geteuid() != 0:
        yield None
        return
    os.makedirs(LOCK_DIR, mode=0o700, exist_ok=True)
    first = next(_next_uid)
    for k in range(UID_COUNT):
        uid = UID_BASE + (first + k) % UID_COUNT
        if uid in _accounts():  # a real user's: its files and processes are not ours to give away
            continue
        fd = os.open(f"{LOCK_DIR}/{uid}", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        try:
            yield uid
        finally:
            os.close(fd)
        return
    raise RuntimeError(f"all {UID_COUNT} sandbox uids are busy")


@contextlib.contextmanager
def _workdir(uid):
    """Not root: a temp dir we remove afterwards. Root: None -- the child makes a private tmpfs."""
    if uid is not None:
        yield None
        return
    path = tempfile.mkdtemp(prefix="sandbox-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def _read_until_exit(proc, deadline):
    """What the child writes to its stdout until it exits -> (bytes, None | "deadline" | "limit").
    Waits on a pidfd, not on end-of-file: a grandchild may hold the pipe open forever."""
    fd, pidfd, data = proc.stdout.fileno(), os.pidfd_open(proc.pid), bytearray()
    os.set_blocking(fd, False)
    watch = [fd, pidfd]
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return bytes(data), "deadline"
            ready = select.select(watch, [], [], left)[0]
            while fd in ready:  # drain what is there
                try:
                    chunk = os.read(fd, 1 << 16)
                except BlockingIOError:
                    break
                if not chunk:
                    watch.remove(fd)
                    break
                data += chunk
                if len(data) > REPORT_MB << 20:
                    return bytes(data), "limit"
            if pidfd in ready:  # exited: its last words, if any, are in the pipe already
                with contextlib.suppress(BlockingIOError):
                    while fd in watch and len(data) <= REPORT_MB << 20 and (chunk := os.read(fd, 1 << 16)):
                        data += chunk
                return bytes(data), None
    finally:
        os.close(pidfd)


def _kill_run(proc, uid, exited):
    """Kill what is left of the run; return once nothing is. Root: the child is `unshare`, whose
    own child is pid 1 of the run's pid namespace. When pid 1 dies the kernel kills every process
    in the namespace, setsid() or not, and reaps them; `unshare` then reaps pid 1 and exits."""
    if uid is not None and not exited:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                for pid in f.read().split():
                    os.kill(int(pid), signal.SIGKILL)
            _wait_exit(proc.pid, 2.0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # not root: all we can do; root: a backstop


def _wait_exit(pid, timeout):
    """Wait until process `pid` has exited (without reaping it), at most `timeout` seconds."""
    pidfd = os.pidfd_open(pid)
    try:
        select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)


def _messages(data, token):
    """[(peak KiB, message)] from the child's report lines; lines without this run's token are
    not ours (the runner's own traceback, if it crashed, is such a line)."""
    prefix, messages = token.encode() + b" ", []
    for line in data.split(b"\n"):
        if line.startswith(prefix):
            with contextlib.suppress(Exception):
                peak, payload = line[len(prefix):].split(b" ")
                message = marshal.loads(bytes.fromhex(payload.decode()))
                if isinstance(message, tuple) and message:
                    messages.append((int(peak), message))
    return messages


def _end_reason(status, cut, cpu_s, cpu_limit, wall_limit):
    """(verdict, detail) for how the child ended; applies to every test it did not report."""
    if cut == "deadline":
        return "timeout", f"over the wall-clock limit ({wall_limit} s)"
    if cut == "limit":
        return "output_limit", f"more than {REPORT_MB} MiB of reports"
    if cpu_s >= cpu_limit - 0.05:  # SIGKILLed by RLIMIT_CPU (`unshare` passes it on as status 1)
        return "timeout", f"over the CPU limit ({cpu_limit} s)"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXFSZ:
            return "output_limit", f"output over {OUTPUT_MB} MiB"
        return "error", f"killed by {signal.Signals(sig).name}"
    return "error", f"exited with status {os.WEXITSTATUS(status)}"


def _judge(tests, plans, messages, ended, data):
    """(verdict, per-test verdicts, detail) from the child's reports and how it ended. A test
    without a report gets the verdict of the child's end; the run's verdict is that of its first
    test that did not pass; "passed" needs every test and the end marker."""
    n, verdicts, details, phases = len(tests), [None] * len(tests), [""] * len(tests), set()
    for kind, *args in messages:
        with contextlib.suppress(IndexError, TypeError, ValueError):  # malformed: ignored
            if kind == "sandbox_error":
                return "sandbox_error", ("sandbox_error",) * n, f"sandbox: {args[0]}"
            if kind == "load_failed" and args[0] in VERDICTS:
                return args[0], (args[0],) * n, str(args[1])
            phases.add(kind)
            i = args[0] if kind in ("test", "value") else None
            if i is None or verdicts[i] is not None:
                continue
            plan_kind, _, expected = plans[i]
            if kind == "value" and plan_kind == "value":  # the only way a value test passes
                verdicts[i] = "passed" if args[1] == expected else "failed"
                details[i] = f"test {i + 1} failed: {tests[i]} (got {reprlib.repr(args[1])})"
            elif kind == "test" and args[1] in VERDICTS and (args[1] != "passed" or plan_kind == "statement"):
                verdicts[i], message = args[1], str(args[2])
                details[i] = (f"test {i + 1} failed: {tests[i]}" + (f" ({message})" if message else "")
                              if args[1] == "failed" else f"test {i + 1}: {message or args[1]}")
    if "started" not in phases:  # the runner's own traceback, if any, is the last line of `data`
        tail = data.decode(errors="replace").strip().splitlines()[-1:] or [ended[1]]
        return "sandbox_error", ("sandbox_error",) * n, f"sandbox: {tail[0][:300]}"
    if "loaded" not in phases:
        return ended[0], (ended[0],) * n, f"while loading the program: {ended[1]}"
    for i in range(n):
        if verdicts[i] is None:
            verdicts[i] = ended[0]
            details[i] = f"test {i + 1}: {'no report' if 'done' in phases else ended[1]}"
    if "done" in phases and all(v == "passed" for v in verdicts):
        return "passed", tuple(verdicts), ""
    first = next((i for i, v in enumerate(verdicts) if v != "passed"), None)
    if first is None:  # every test passed, then the end marker never came
        return ended[0], tuple(verdicts), f"after the last test: {ended[1]}"
    return verdicts[first], tuple(verdicts), details[first][:500]


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
    right, wrong = run_program(program.format("+"), tests), run_program(program.format("-"), tests)
    if right.verdict != "passed" or wrong.verdict != "failed":
        raise RuntimeError(f"sandbox self-check failed: the right program came back {right.verdict} "
                           f"({right.detail}), the wrong one {wrong.verdict} ({wrong.detail})")
