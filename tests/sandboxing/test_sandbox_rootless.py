"""The sandbox run by an ordinary user: the same verdicts as root's, and the host out of reach.

Most users are not root, and CI is, so the tests drop to an unprivileged uid of their own: the
sandbox's files are copied into a folder of that uid's, and tests/sandboxing/sandbox_as_user.py runs there
with the system's python3 (the sandbox needs only the standard library). After every hostile
program it checks the host: no file created or changed in the uid's home, the sandbox's own
files, /tmp, /var/tmp or /dev/shm; no process of the uid left; no connection to a listener on
127.0.0.1. Skipped, with the reason, where this process is not root or no such python3 exists.
"""
import json
import os
import pwd
import shutil
import signal
import socket
import subprocess
import tempfile

import pytest
import test_sandbox_adversarial as adversarial
import test_sandbox_forgery as forgery
import test_sandbox_memory as memory_tests

import sandbox
from sandboxing import cgroup, memory, process

SYSTEM_PYTHON = next((p for p in ("/usr/bin/python3", "/usr/local/bin/python3") if os.access(p, os.X_OK)), None)
UID = 61234  # an unprivileged uid of the tests' own, outside process.UID_BASE's range and not an account
FILES = ("sandbox.py", "data/problem.py", "tests/sandboxing/sandbox_as_user.py", "tests/sandboxing/no_namespaces.py")  # and sandboxing/
pytestmark = [pytest.mark.skipif(os.geteuid() != 0, reason="drops to an unprivileged uid: needs root (as CI)"),
              pytest.mark.skipif(SYSTEM_PYTHON is None, reason="no system python3 that another uid can run")]


class User:
    """An unprivileged uid with a home (a secret in it), a copy of the sandbox it may write to
    (the threat: a program that rewrites the judge), and a file of its own in /tmp."""

    def __init__(self, uid, tag):
        assert uid not in {u.pw_uid for u in pwd.getpwall()}
        self.uid, base = uid, "/home" if os.path.isdir("/home") else "/var/lib"
        self.home = tempfile.mkdtemp(prefix=f"core-sandbox-{tag}-home-", dir=base)
        self.copy = tempfile.mkdtemp(prefix=f"core-sandbox-{tag}-copy-", dir=base)
        self.tmp_file = tempfile.mktemp(prefix=f"core-sandbox-{tag}-", dir="/tmp")
        # another checkout's answers and a service's socket: neither in the home nor in the project
        self.other = tempfile.mkdtemp(prefix=f"core-sandbox-{tag}-other-", dir="/var/lib")
        self.answers, self.socket = os.path.join(self.other, "val.jsonl"), os.path.join(self.other, "agent.sock")
        with open(self.answers, "w") as f:
            f.write('{"solution": "def f(x):\\n    return 2 * x\\n"}\n')
        for name in FILES:
            shutil.copy(os.path.join(process.HERE, name), self.copy)
        shutil.copytree(os.path.join(process.HERE, "sandboxing"), os.path.join(self.copy, "sandboxing"),
                        ignore=shutil.ignore_patterns("__pycache__"))
        with open(os.path.join(self.home, "secret"), "w") as f:
            f.write("hunter2")
        with open(self.tmp_file, "w") as f:
            f.write("mine")
        os.chmod(os.path.join(self.home, "secret"), 0o600)
        package = os.path.join(self.copy, "sandboxing")
        for path in (self.home, self.copy, self.tmp_file, *(os.path.join(self.copy, n) for n in os.listdir(self.copy)),
                     *(os.path.join(package, n) for n in os.listdir(package)),
                     os.path.join(self.home, "secret"), self.other, self.answers):
            os.chown(path, uid, uid)
        for folder in (self.home, self.copy, self.other):  # Debian's default: a home others may enter
            os.chmod(folder, 0o755)
        os.chmod(self.answers, 0o644)

    def run(self, cases, port=0, unsafe=False, env=None, timeout=600, listen=False, budget_mb=None, meter=False,
            wrap=(), as_root=False):
        """tests/sandboxing/sandbox_as_user.py as this uid -> its per-case results (`listen`: it also holds a
        unix socket at self.socket and a secret in a session keyring of its own; `budget_mb`: the runs'
        memory budget; `meter`: the script runs in an unlimited cgroup whose peak it reports per case;
        `wrap`: flags of tests/sandboxing/no_namespaces.py, run around it; `as_root`: the script runs as root (it then
        watches this uid's files, and counts as left what is still in its meter's cgroup))."""
        job = os.path.join(self.copy, "job.json")
        gauge = cgroup.create(memory.hierarchy(), None) if meter else None
        fds = gauge.open_procs() if gauge else []
        if gauge:  # the script resets the peak before each case: that file is the uid's to write
            os.chown(os.path.join(gauge.memory, "memory.max_usage_in_bytes"), self.uid, self.uid)
        with open(job, "w") as f:
            json.dump({"cases": cases, "watch": [self.home, self.copy, self.other, "/tmp", "/var/tmp", "/dev/shm"],
                       "port": port, "unsafe": unsafe, "unix": self.socket if listen else "",
                       "keyring": "hunter2" if listen else "", "budget_mb": budget_mb,
                       "meter": gauge.memory if gauge else "", "owner": self.uid, "left_in_meter": as_root,
                       "watch_any": ["/dev/shm"] if as_root else []}, f)
        os.chown(job, self.uid, self.uid)
        try:
            wrapper = [SYSTEM_PYTHON, os.path.join(self.copy, "no_namespaces.py"), *wrap] if wrap else []
            who = {} if as_root else dict(user=self.uid, group=self.uid, extra_groups=[])
            done = subprocess.run([*wrapper, SYSTEM_PYTHON, "-I", os.path.join(self.copy, "sandbox_as_user.py"), job],
                                  **who, cwd=self.copy, capture_output=True,
                                  text=True, timeout=timeout, pass_fds=fds,
                                  preexec_fn=(lambda: [os.write(fd, b"0") for fd in fds]) if fds else None,
                                  env={"HOME": self.home, "PATH": "/usr/bin:/bin", **(env or {})})
        finally:
            if gauge:
                gauge.close()
        assert done.returncode == 0, done.stderr[-2000:]
        return json.loads(done.stdout)

    def command(self, *args, env=None, wrap=(), as_root=False):
        wrapper = [SYSTEM_PYTHON, os.path.join(self.copy, "no_namespaces.py"), *wrap] if wrap else []
        who = {} if as_root else dict(user=self.uid, group=self.uid, extra_groups=[])
        return subprocess.run([*wrapper, SYSTEM_PYTHON, "-E", "-s", *args], **who,
                              cwd=self.copy, capture_output=True, text=True, timeout=120,
                              env={"HOME": self.home, "PATH": "/usr/bin:/bin", **(env or {})})

    def processes(self):
        """Pids of this uid alive now (zombies included)."""
        return [int(p) for p in filter(str.isdigit, os.listdir("/proc")) if _uid_of(p) == self.uid]

    def close(self):
        for pid in self.processes():
            with __import__("contextlib").suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        for path in (self.home, self.copy, self.other):
            shutil.rmtree(path, ignore_errors=True)
        with __import__("contextlib").suppress(FileNotFoundError):
            os.remove(self.tmp_file)


def _state(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except OSError:
        return None


def _uid_of(pid):
    try:
        with open(f"/proc/{pid}/status") as f:
            return int(next(line for line in f if line.startswith("Uid:")).split()[1])
    except (OSError, StopIteration):
        return None


@pytest.fixture(scope="module")
def user():
    u = User(UID, "t")
    yield u
    u.close()


def extra_cases(u, port, root=False):
    """What an ordinary user's host offers a program, each refused in the sandbox (expected: passed).
    `root`: the expectations of a run as root, where the kernel lets the leased uid make a user
    namespace (no capability is needed for that), in which every mount of ours is locked."""
    refused = "    except OSError:\n        return 'refused'\n"
    undo = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ndef f():\n    done = []\n"
            "    if libc.umount2(b'/tmp', 2) == 0: done.append('umount')\n"
            f"    if libc.umount2({u.home.encode()!r}, 2) == 0: done.append('umount home')\n"
            "    if libc.mount(b'none', b'/mnt', b'tmpfs', 0, None) == 0: done.append('mount')\n"
            "    if libc.mount(None, b'/', None, 32 | 4096, None) == 0: done.append('remount /')\n"
            "    for flag in (0x20000, 0x20000000, 0x40000000, 0x08000000):\n"
            "        if libc.unshare(flag) == 0: done.append(f'unshare {flag:#x}')\n"
            "    for kind in ('mnt', 'net', 'pid', 'user'):\n"
            "        fd = os.open(f'/proc/self/ns/{kind}', os.O_RDONLY)\n"
            "        if libc.setns(fd, 0) == 0: done.append(f'setns {kind}')\n"
            "        os.close(fd)\n"
            "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "        if int(pid) != os.getpid() and libc.ptrace(16, int(pid), None, None) == 0:\n"
            "            done.append(f'ptrace {pid}')\n"
            "    return done\n")
    nested = ("import ctypes, os\nlibc = ctypes.CDLL(None, use_errno=True)\ndef f():\n"
              "    if libc.unshare(0x10000000 | 0x20000) != 0:\n        return 'refused'\n"
              f"    for path in (b'/tmp', {u.home.encode()!r}, b'/dev', b'/proc'):\n"
              "        if libc.umount2(path, 2) == 0:\n            return 'revealed'\n    return 'locked'\n")
    judge_paths = [os.path.join(u.copy, "sandboxing/judge.py"), os.path.join(u.copy, "sandboxing/runner.py")]
    walk = ("import os\ndef f():\n    wrote = 0\n    paths = " + repr(judge_paths) + "\n"
            "    for pid in filter(str.isdigit, os.listdir('/proc')):\n"
            "        paths += [f'/proc/{pid}/cwd/sandboxing/judge.py', f'/proc/{pid}/root" + u.copy + "/sandboxing/judge.py']\n"
            "    for p in paths:\n        try:\n            open(p, 'r+').write('# rewritten')\n            wrote += 1\n"
            "        except OSError:\n            pass\n    return wrote\n")
    bomb = ("import os, time\ndef f():\n    n = 0\n    while n < 200:\n        try:\n            pid = os.fork()\n"
            "        except OSError:\n            break\n        if pid == 0:\n            time.sleep(30)\n"
            "            os._exit(0)\n        n += 1\n    return n\n")
    seize = ("import ctypes, os\nlibc = ctypes.CDLL(None)\n"  # at once: before the judge could hide itself
             "SEIZED = [p for p in filter(str.isdigit, os.listdir('/proc'))\n"
             "          if int(p) != os.getpid() and libc.ptrace(0x4206, int(p), None, None) == 0]\n"
             "def f():\n    return SEIZED\n")
    keys = ("import ctypes, os\nlibc = ctypes.CDLL(None)\nARCH = os.uname().machine\n"
            "KEYCTL, ADD_KEY = {'x86_64': 250, 'aarch64': 219}[ARCH], {'x86_64': 248, 'aarch64': 217}[ARCH]\n"
            "def f():\n"
            "    found = [k for k in (-3, -4, -5) if libc.syscall(KEYCTL, 10, k, b'user', b'core-sandbox-secret', 0) > 0]\n"
            "    for k in (-3, -4, -5):\n        libc.syscall(ADD_KEY, b'user', b'left-by-run', b'x', 1, k)\n"
            "    return found\n")
    return [
        ("ptraces every process of the run at once", seize, ["assert not f()"], {"timeout_s": 1.0}),
        ("reads the caller's session keyring, leaves keys", keys, ["assert f() == []"], {"timeout_s": 1.0}),
        ("reads another checkout's answers", f"def f():\n    try:\n        return open({u.answers!r}).read()\n{refused}",
         ["assert f() == 'refused'"], {"timeout_s": 1.0}),
        ("connects to a unix socket of the user's", f"import socket\ndef f():\n    try:\n"
         f"        socket.socket(socket.AF_UNIX).connect({u.socket!r})\n        return 'connected'\n{refused}",
         ["assert f() == 'refused'"], {"timeout_s": 1.0}),
        ("reads a secret in the home", f"def f():\n    try:\n        return open({u.home + '/secret'!r}).read()\n{refused}",
         ["assert f() == 'refused'"], {"timeout_s": 1.0}),
        ("writes a file into the home", f"def f():\n    try:\n        open({u.home + '/left'!r}, 'w').write('x')\n"
         f"        return 'wrote'\n{refused}", ["assert f() == 'refused'"], {"timeout_s": 1.0}),
        ("deletes the user's file in /tmp", f"import os\ndef f():\n    try:\n        os.remove({u.tmp_file!r})\n"
         f"        return 'deleted'\n{refused}", ["assert f() == 'refused'"], {"timeout_s": 1.0}),
        ("connects to a listener on 127.0.0.1", f"import socket\ndef f():\n    try:\n"
         f"        socket.create_connection(('127.0.0.1', {port}), timeout=1).close()\n        return 'connected'\n"
         f"{refused}", ["assert f() == 'refused'"], {"timeout_s": 2.0}),
        ("rewrites the judge, also through /proc/<pid>/cwd", walk, ["assert f() == 0"], {"timeout_s": 1.0}),
        ("undoes its sandbox: umount, mount, unshare, setns, ptrace", undo, ["assert not f()"], {"timeout_s": 2.0}),
        ("nested user namespace, then umount", nested, [f"assert f() == {'locked' if root else 'refused'!r}"],
         {"timeout_s": 2.0}),
        ("ptraces the runner from an I/O test", "import ctypes, os\nlibc = ctypes.CDLL(None)\n"
         "print(libc.ptrace(16, os.getppid(), None, None))\n", [], {"io_tests": [("", "-1")], "timeout_s": 1.0}),
        ("fork bomb, counted", bomb, ["assert f() <= 32"], {"timeout_s": 2.0}),
    ]


def adversarial_cases(u):
    """test_sandbox_adversarial's and test_sandbox_forgery's programs, aimed at this user's files."""
    cases, expected = [], {}
    for name, program, tests, kwargs, verdict, per_test in adversarial.CASES:
        if "numpy" in program:  # the system python3 may not have numpy: not a sandbox question
            continue
        program = program.replace(adversarial.CANARY, u.tmp_file).replace(adversarial.SOURCE, u.copy + "/sandbox.py")
        cases.append((name, program, tests, {"timeout_s": adversarial.TIMEOUT, **kwargs}))
        expected[name] = (verdict, list(per_test))
    for name, program, io_tests, kwargs, per_test in adversarial.IO_CASES:
        cases.append((name, program, [], {"io_tests": io_tests, "timeout_s": adversarial.TIMEOUT, **kwargs}))
        expected[name] = (next((v for v in per_test if v != "passed"), "passed"), list(per_test))
    for mode, where in forgery.FORGERS:
        for kind, tests, setup in forgery.KINDS:
            cases.append((f"forger {mode}-{where}: {kind}", forgery.forger(mode, where), tests,
                          {"setup": setup, "timeout_s": 1.0}))
    return cases, expected


def test_hostile_programs_as_an_ordinary_user(user):
    """Catches a sandbox that isolates root only: as an ordinary user, a program deleted the user's
    file in /tmp, left a daemon running, wrote into and read from the home, reached 127.0.0.1, and
    rewrote the judge through /proc/<ancestor>/cwd. Now every verdict is root's and the host is intact."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # the harness listens on it, as the uid
    cases, expected = adversarial_cases(user)
    extra = extra_cases(user, port)
    results = user.run(cases + [list(c) for c in extra], port=port, listen=True)
    problems = []
    for r in results:
        if r["name"].startswith("forger"):
            ok = r["passed"] == 0 and r["verdict"] != "passed"
        elif r["name"] in expected:
            ok = (r["verdict"], r["tests"]) == expected[r["name"]]
        else:
            ok = r["verdict"] == "passed"
        host = r["changes"] or r["left"] or r["connections"] or r["unsafe"]
        if not ok or host:
            problems.append((r["name"], r["verdict"], r["tests"], r["detail"][:120], r["changes"][:3], r["left"],
                             r["connections"]))
    assert problems == []
    assert user.processes() == []
    assert len(results) == len(cases) + len(extra) >= 90


def test_the_extra_cases_get_the_same_verdicts_as_root(user):
    """The programs written for the ordinary user, run as root in this process: root's verdicts."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        for name, program, tests, kwargs in extra_cases(user, server.getsockname()[1], root=True):
            r = sandbox.run_program(program, tests, **kwargs)
            assert r.verdict == "passed", (name, r.tests, r.detail)


def test_check_lists_every_guarantee_as_an_ordinary_user(user):
    """`python sandbox.py --check` as the uid: user namespaces, every guarantee yes, exit 0."""
    done = user.command("sandbox.py", "--check")
    lines = done.stdout.splitlines()
    assert done.returncode == 0 and lines[0] == "sandbox: user namespace (not root)", done.stdout + done.stderr
    assert [line.split()[0] for line in lines[1:-1]] == ["uid", "pid", "network", "filesystem", "home", "answers",
                                                          "capabilities", "rlimits", "host", "daemons"]
    assert all(" yes " in line for line in lines[1:-1]), done.stdout
    assert f"not in the run's filesystem: {user.home}" in done.stdout
    assert " 16 processes" in lines[8]  # without a cgroup: a lower RLIMIT_NPROC (the rlimits line)
    assert lines[-1].startswith("memory: seccomp + rlimits + watchdog, aim 2048 MiB per run, best effort, worst case "
                                "18.1 GiB (no cgroup: "), lines[-1]


@pytest.mark.skipif(not memory_tests.CGROUP_V1, reason="measures the user's runs with a cgroup v1 meter")
def test_memory_budget_as_an_ordinary_user(user):
    """The ordinary user's mechanism (no cgroup can be made: seccomp + rlimits + watchdog), as the uid:
    each hostile channel gets the verdict it gets as root without a cgroup, and the true peak of the
    user's whole process (an unlimited cgroup around it, reset before each case; the script's own
    ~20 MiB included) stays within budget + WATCHDOG_SLACK + that baseline; the honest programs pass."""
    honest = {n: p for n, p in memory_tests.HONEST.items() if n != "numpy"}  # the system python3 has none
    cases = [[name, program, ["assert f() == 'done'"], {"timeout_s": 5.0, "memory_mb": 256}]
             for name, program in memory_tests.PROGRAMS.items()]
    cases += [[name, program, [test], {"timeout_s": 5.0}] for name, (program, test) in honest.items()]
    out = user.run(cases, budget_mb=memory_tests.BUDGET, meter=True)
    got = {c["name"]: c["verdict"] for c in out}
    assert got == {**memory_tests.EXPECTED["watchdog"], **{n: "passed" for n in honest}}, [c["detail"] for c in out]
    for c in out:
        assert c["peak_mb"] - c["baseline_mb"] <= memory_tests.BUDGET + memory_tests.WATCHDOG_SLACK, (c["name"], c["detail"], c["peak_mb"], c["baseline_mb"], c["run_peak_mb"])


def test_without_namespaces_an_ordinary_user_is_refused_unless_unsafe(user):
    """Catches untrusted code run silently without isolation: where no namespace can be made
    (forced here), a run is a sandbox_error whose detail is the refusal; allow_unsafe() runs it,
    marked unsafe; --check says no for every namespace's guarantee and exits 1."""
    env = {sandbox.NO_NAMESPACES: "1"}
    cases = [["double", "def f(x):\n    return 2 * x\n", ["assert f(2) == 4"], {"timeout_s": 1.0}]]
    refused, = user.run(cases, env=env)
    assert refused["verdict"] == "sandbox_error" and refused["detail"].startswith(
        "sandbox: cannot isolate generated programs on this machine (namespaces switched off by")
    assert "--unsafe-sandbox" in refused["detail"] and not refused["unsafe"]
    ran, = user.run(cases, env=env, unsafe=True)
    assert (ran["verdict"], ran["unsafe"]) == ("passed", True)
    check = user.command("sandbox.py", "--check", env=env)
    assert check.returncode == 1 and check.stdout.splitlines()[0] == \
        "sandbox: no namespaces (not root, user namespaces refused)"
    assert {line[2:17].strip(): line[17:21].strip() for line in check.stdout.splitlines()[1:9]} == {
        "uid": "no", "pid": "no", "network": "no", "filesystem": "no", "home hidden": "no", "answers hidden": "no",
        "capabilities": "yes", "rlimits": "no"}


def test_the_harness_sees_what_an_unisolated_program_changes(user):
    """Catches a harness that cannot fail: with no isolation at all (namespaces off, unsafe), a program that
    plants a file in the home and one that removes the uid's file in /tmp are each caught, and each blamed on
    its own case only (one case's snapshot after is the next one's before)."""
    env = {sandbox.NO_NAMESPACES: "1"}
    plant = f"def f():\n    open({os.path.join(user.home, 'planted')!r}, 'w').write('x')\n    return 1\n"
    remove = f"import os\ndef f():\n    os.remove({user.tmp_file!r})\n    return 1\n"
    cases = [[name, program, ["assert f() == 1"], {"timeout_s": 1.0}]
             for name, program in (("plants", plant), ("removes", remove), ("harmless", "def f():\n    return 1\n"))]
    out = user.run(cases, env=env, unsafe=True)
    assert [(c["verdict"], c["changes"]) for c in out] == [
        ("passed", [os.path.join(user.home, "planted")]), ("passed", [user.tmp_file]), ("passed", [])]


def test_root_without_namespaces_keeps_a_leased_uid_and_kills_by_uid(user):
    """Root where no namespace can be made (a container without CAP_SYS_ADMIN, forced here):
    refused unless unsafe; unsafe, the run has a uid of its own, and a detached grandchild it
    left is killed by uid after the verdict."""
    env = {sandbox.NO_NAMESPACES: "1", "HOME": "/root"}
    daemon = ("import os, time\ndef f(x):\n    if os.fork() == 0:\n        os.setsid()\n        if os.fork() == 0:\n"
              "            time.sleep(1000)\n        os._exit(0)\n    time.sleep(0.2)\n    return os.getuid()\n")
    script = ("import json, sys\nsys.path.insert(0, '.')\nimport sandbox\nsandbox.allow_unsafe(len(sys.argv) > 1)\n"
              f"r = sandbox.run_program({daemon!r}, ['assert f(2) == 0'], timeout_s=2.0)\n"
              "print(json.dumps([sandbox.isolation().mode, r.verdict, r.detail, r.unsafe]))\n")
    runs = [subprocess.run([SYSTEM_PYTHON, "-I", "-c", script, *extra], cwd=user.copy, capture_output=True, text=True,
                           env=env, timeout=60) for extra in ((), ("unsafe",))]
    refused, ran = (json.loads(r.stdout) for r in runs)
    assert refused[:2] == ["uid", "sandbox_error"] and "cannot isolate" in refused[2]
    assert ran[0] == "uid" and ran[1] == "failed" and ran[3] is True
    uid = int(ran[2].rsplit("(got ", 1)[1].rstrip(")"))  # the run's uid: its own, not root's
    assert process.UID_BASE <= uid < process.UID_BASE + process.UID_COUNT
    # killed: what is left of them is a zombie until init reaps it (its parent, the runner, is gone too)
    assert [p for p in filter(str.isdigit, os.listdir("/proc")) if _uid_of(p) == uid and _state(p) != "Z"] == []
