"""Run an untrusted program against unit tests and tell the truth about the result.

The reward of a generated program is its pass rate here, so this file decides what GRPO learns:
if a program can make itself look correct, the policy learns to cheat; if a run hangs or leaks
processes, training dies at step 3,000.

One run (`run_program`); the child half is sandbox_runner.py:

    parent (this file)                           child (`python -I -S`, fresh per program)
    lease a uid of our own (when root)
    split the tests: `assert EXPR == LITERAL`
      sends only EXPR, keeps LITERAL here
    spawn; job + random token on stdin   ----->  root: private mounts/network/IPC, rlimits, drop uid
                                                 stdin </dev/null; stdout, stderr -> capped file
                                                 run the program, then each test in a fresh namespace
    read `TOKEN message` lines           <-----  one report per test, then the end marker ("done",)
    compare each EXPR's value with LITERAL
    kill the process group and every process of the uid; reap; release the uid

Truth. A test counts only when its own report, carrying the run's random token, came back: exit
code 0 proves nothing, and `sys.exit(0)`, `os._exit(0)` or a dead interpreter lose the tests
they skipped. `assert EXPR == LITERAL` tests (MBPP's kind) are judged HERE: the child sends EXPR's
value as marshal data, which only builtin types survive (an always-equal object does not), and
never sees LITERAL. Other statements (HumanEval's `check(f)`) run in the child with the builtins
and the test modules as they were before the program ran, a fresh namespace per test, and every
program function's result rebuilt from plain data; a program that rewrites the runner itself
through frames is caught after the test. What one process cannot stop: a program that steals the
token from the runner's frames and forges statement-test reports. Value tests are immune to that.

Limits (root, the normal case; each documented where it is set):
    CPU         RLIMIT_CPU = timeout_s x (tests + 1) + STARTUP_S for the whole run; each test (and
                the program's own top level) also gets a timeout_s CPU timer, so one endless test
                costs 1 test, not the run: 9 passing tests and 1 loop give 9/10, "timeout".
    wall        WALL_FACTOR x the CPU limit per test and per run: a sleeping or blocked program.
    memory      RLIMIT_AS = a fresh interpreter's own address space (~13 MiB) + memory_mb.
    output      stdout+stderr and any file the program writes: OUTPUT_MB (RLIMIT_FSIZE).
    processes   MAX_PROCS per run, threads included (RLIMIT_NPROC counts per uid: hence own uid).
    files       256 open files; no core dumps.
Isolation (root): a uid leased for this run only (UID_BASE..), so it can write nothing of ours,
signal nothing of ours, and every process it leaves is found by uid and killed, `setsid` or not;
no network (empty network namespace); a private tmpfs as working dir and over /tmp, /var/tmp,
/dev/shm, gone with the run; an empty environment but for three thread caps; no setuid gains.
Not root: the same rlimits and process-group kill, but no uid, namespaces or process limit, and a
grandchild that calls setsid() can survive. Linux only.
"""
import ast
import contextlib
import fcntl
import functools
import itertools
import marshal
import math
import os
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

VERDICTS = ("passed", "failed", "error", "timeout", "memory", "output_limit", "no_code", "sandbox_error")
MEMORY_MB = 1024  # address space above a fresh interpreter's: `import numpy` takes ~90 MiB of it
OUTPUT_MB = 8  # stdout + stderr, and each file the program writes
REPORT_MB = 16  # the most we read back from one run (reports, returned values); bounds our memory
MAX_PROCS = 32  # processes + threads of one run (a fork bomb stops here)
WALL_FACTOR = 3  # wall seconds allowed per CPU second, for a busy machine
STARTUP_S = 0.5  # CPU seconds for the interpreter's start and imports (~0.02 s; numpy ~0.15 s)
UID_BASE, UID_COUNT = 60000, 256  # uids leased to runs when we are root; must be unused here
LOCK_DIR = "/run/lock/coresandbox"  # one lock file per uid: who holds it runs as that uid
ENV = {"OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
HERE = os.path.dirname(os.path.abspath(__file__))
BOOT = f"import sys; sys.path.insert(0, {HERE!r}); import sandbox_runner; sandbox_runner.main()"


@dataclass(frozen=True)
class Result:
    verdict: str  # one of VERDICTS
    passed: int  # tests that passed
    total: int  # len(tests)
    cpu_s: float  # CPU seconds of the child (user + sys)
    wall_s: float  # wall seconds of the run
    peak_rss_mb: float  # peak resident memory of the child, MiB
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

    timeout_s: CPU seconds for each test and for the program's own top level; memory_mb: see
    MEMORY_MB. Never raises for anything the program does.
    >>> run_program("def f(x):\\n    return 2 * x", ["assert f(2) == 4", "assert f(3) == 5"]).tests
    ('passed', 'failed')
    """
    tests = list(tests)
    if program is None or not program.strip():
        return Result("no_code", 0, len(tests), 0.0, 0.0, 0.0, "no program", ("no_code",) * len(tests))
    plans = [_plan(test) for test in tests]
    cpu_limit = math.ceil(timeout_s * (len(tests) + 1) + STARTUP_S)
    job = dict(program=program, setup=setup, tests=[(kind, src) for kind, src, _ in plans],
               modules=_modules(setup, tuple(t for t, (kind, _, _) in zip(tests, plans) if kind == "statement")),
               token=secrets.token_hex(16), timeout_s=timeout_s, wall_s=WALL_FACTOR * timeout_s,
               cpu_limit_s=cpu_limit, memory_mb=memory_mb, output_bytes=OUTPUT_MB << 20,
               max_procs=MAX_PROCS, site_dirs=site.getsitepackages(), uid=None, expose=[])
    start = time.monotonic()
    with _own_uid() as uid, _workdir(uid) as workdir:
        if uid is not None:
            job.update(uid=uid, expose=_hidden_interpreter())
        try:
            proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", BOOT], stdin=subprocess.PIPE,
                                    stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=ENV,
                                    cwd=workdir, start_new_session=True)
        except OSError as e:
            return Result("sandbox_error", 0, len(tests), 0.0, 0.0, 0.0, f"spawn: {e}", ("sandbox_error",) * len(tests))
        try:
            with contextlib.suppress(BrokenPipeError):
                proc.stdin.write(marshal.dumps(job))
                proc.stdin.close()
            data, cut = _read_until_exit(proc, start + WALL_FACTOR * cpu_limit)
        finally:
            _kill_run(proc.pid, uid)  # before reaping: the pid cannot be reused until then
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            proc.stdout.close()
    cpu_s = usage.ru_utime + usage.ru_stime
    ended = _end_reason(status, cut, cpu_s, cpu_limit, WALL_FACTOR * cpu_limit)
    verdict, per_test, detail = _judge(tests, plans, _messages(data, job["token"]), ended, data)
    return Result(verdict, per_test.count("passed"), len(tests), round(cpu_s, 4),
                  round(time.monotonic() - start, 4), round(usage.ru_maxrss / 1024, 1), detail, per_test)


@functools.lru_cache(maxsize=65536)
def _plan(test):
    """("value", EXPR, LITERAL's value) for `assert EXPR == LITERAL`; else ("statement", test, None).

    >>> _plan("assert f([1, 2]) == (3, 'a')")
    ('value', 'f([1, 2])', (3, 'a'))
    >>> _plan("assert math.isclose(f(1), 2.5)")[0]
    'statement'
    """
    with contextlib.suppress(Exception):
        node = ast.parse(test).body
        if len(node) == 1 and isinstance(node[0], ast.Assert) and isinstance(node[0].test, ast.Compare):
            compare = node[0].test
            if len(compare.ops) == 1 and isinstance(compare.ops[0], ast.Eq):
                for expr, literal in ((compare.left, compare.comparators[0]), (compare.comparators[0], compare.left)):
                    with contextlib.suppress(Exception):
                        expected = ast.literal_eval(literal)
                        return "value", ast.get_source_segment(test, expr) or ast.unparse(expr), expected
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
    """[(private dir, [dirs to show in it])] for our interpreter's files that lie below a
    directory other users may not enter (pyenv in /root, 0700): the child shows just those."""
    needed = {os.path.realpath(p) for p in (sys.base_prefix, sys.prefix, HERE, *site.getsitepackages())}
    hidden = {}
    for path in needed:
        parts = path.split("/")
        for n in range(2, len(parts)):
            ancestor = "/".join(parts[:n])
            if not os.stat(ancestor).st_mode & stat.S_IXOTH:
                hidden.setdefault(ancestor, set()).add(path)
                break
    return [(private, sorted(p for p in keep if not any(p.startswith(q + "/") for q in keep)))
            for private, keep in hidden.items()]


_next_uid = itertools.count()


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
            if pidfd in ready:
                if fd in watch:  # the last words, if any, are in the pipe already
                    with contextlib.suppress(BlockingIOError):
                        data += os.read(fd, (REPORT_MB << 20) + 1 - len(data))
                return bytes(data), None
    finally:
        os.close(pidfd)


def _kill_run(pid, uid):
    """SIGKILL the child's process group and, when it ran under a uid of its own, every process of
    that uid -- detached grandchildren too -- until none is left. Zombies are harmless: skipped."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGKILL)
    for _ in range(1000) if uid is not None else ():
        alive = _processes_of(uid)
        if not alive:
            return
        for p in alive:
            with contextlib.suppress(ProcessLookupError):
                os.kill(p, signal.SIGKILL)
        time.sleep(0.001)


def _processes_of(uid):
    """Pids of the live (non-zombie) processes owned by `uid`; ~0.3 ms for 150 processes."""
    pids = []
    for entry in os.scandir("/proc"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            if entry.name.isdigit() and entry.stat().st_uid == uid:
                with open(f"/proc/{entry.name}/stat", "rb") as f:
                    state = f.read().rsplit(b")", 1)[1].split()[0]
                if state not in (b"Z", b"X"):
                    pids.append(int(entry.name))
    return pids


def _messages(data, token):
    """The child's reports, in order; lines without this run's token are not ours."""
    prefix = token.encode() + b" "
    for line in data.split(b"\n"):
        if line.startswith(prefix):
            with contextlib.suppress(Exception):
                message = marshal.loads(bytes.fromhex(line[len(prefix):].decode()))
                if isinstance(message, tuple) and message:
                    yield message


def _end_reason(status, cut, cpu_s, cpu_limit, wall_limit):
    """(verdict, detail) for how the child ended; applies to every test it did not report."""
    if cut == "deadline":
        return "timeout", f"over the wall-clock limit ({wall_limit} s)"
    if cut == "limit":
        return "output_limit", f"more than {REPORT_MB} MiB of reports"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_s >= cpu_limit):
            return "timeout", f"over the CPU limit ({cpu_limit} s)"
        if sig == signal.SIGXFSZ:
            return "output_limit", f"output over {OUTPUT_MB} MiB"
        return "error", f"killed by {signal.Signals(sig).name}"
    return "error", f"exited with status {os.WEXITSTATUS(status)}"


def _judge(tests, plans, messages, ended, data):
    """(verdict, per-test verdicts, detail) from the child's reports. The run's verdict is that of
    its first test that did not pass; "passed" needs every test and the end marker."""
    verdicts, details = [None] * len(tests), [""] * len(tests)
    started = done = False
    load = None
    for message in messages:
        kind, args = message[0], message[1:]
        if kind == "sandbox_error":
            return "sandbox_error", ("sandbox_error",) * len(tests), f"sandbox: {args[0]}"
        started |= kind == "started"
        done |= kind == "done"
        if kind == "load_failed" and load is None and len(args) == 2 and args[0] in VERDICTS:
            load = args
        elif kind in ("test", "value") and len(args) >= 2 and args[0] in range(len(tests)) \
                and verdicts[args[0]] is None:
            i, (plan_kind, src, expected) = args[0], plans[args[0]]
            if kind == "value" and plan_kind == "value":  # the one place a value test can pass
                verdicts[i] = "passed" if args[1] == expected else "failed"
                details[i] = f"test {i + 1} failed: {tests[i]} (got {reprlib.repr(args[1])})"
            elif kind == "test" and len(args) == 3 and args[1] in VERDICTS \
                    and (args[1] != "passed" or plan_kind == "statement"):
                verdicts[i] = args[1]
                details[i] = (f"test {i + 1} failed: {tests[i]}" + (f" ({args[2]})" if args[2] else "")
                              if args[1] == "failed" else f"test {i + 1}: {args[2] or args[1]}")
    if not started:
        tail = data.decode(errors="replace").strip().splitlines()[-1:] or [ended[1]]
        return "sandbox_error", ("sandbox_error",) * len(tests), f"sandbox: {tail[0][:300]}"
    if load:
        return load[0], (load[0],) * len(tests), load[1]
    for i, verdict in enumerate(verdicts):
        if verdict is None:
            verdicts[i], details[i] = ended[0], f"test {i + 1}: {ended[1]}" if not done else f"test {i + 1}: no report"
    if all(v == "passed" for v in verdicts) and done:
        return "passed", tuple(verdicts), ""
    first = next((i for i, v in enumerate(verdicts) if v != "passed"), None)
    if first is None:
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
