"""The child's own limits and data, for runner.py (which says the order; its isolation is
confine.py's).

The rlimits, stdio, memory readings from /proc, the timers that end a test (guarded), and what
crosses a process boundary: plain data (builtin types only, what marshal carries), framed on pipes.
Only cheap stdlib modules here: their import time is paid on every run.
"""
import os
import resource
from _signal import ITIMER_PROF, ITIMER_REAL, SIGALRM, SIGPROF, setitimer
from _signal import signal as set_handler  # _signal: the C half of `signal`, minus its 5 ms `enum` import
from builtins import (
    AssertionError,
    BaseException,
    ChildProcessError,
    MemoryError,
    OSError,
    any,
    dict,
    getattr,
    int,
    issubclass,
    len,
    str,
    sum,
    type,
    vars,
)
from marshal import dumps, loads
from os import close, kill, listdir, read, waitpid
from os import open as os_open

PR_SET_DUMPABLE = 4
FAILURES = ("failed", "error", "timeout", "memory", "output_limit")  # judge.FAILURES: no "passed"
RLIM_INFINITY = resource.RLIM_INFINITY
EFBIG_HINT = "[Errno 27]"  # in the traceback of a write past RLIMIT_FSIZE
FRAME_LIMIT = 64 << 20  # the largest message on the runner <-> judge pipes
FunctionType = type(lambda: None)
PYTHON_DEFINED = (FunctionType, classmethod, staticmethod, property)


def libc(name, *args):
    """Call a C library function with int / bytes / None arguments. Through _ctypes, the C half
    of ctypes: importing all of ctypes would cost ~7 ms on every run, a quarter of it."""
    if libc_value(name, *args) != 0:
        raise OSError(f"{name}{args!r:.160} failed")


def libc_value(name, *args):
    """The same call, returning what the function returned (a C int; -1 is an error)."""
    import _ctypes
    return _ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None), name), args)


def set_limits(job):
    """The rlimits of the run; every process it starts inherits them. Numbers: see sandbox.py."""
    cpu, output = job["cpu_limit_s"], job["output_bytes"]
    address_space = own_address_space() + job["memory_mb"] * 2**20
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu),  # SIGKILL at `cpu` s (as pid 1 we would ignore SIGXCPU)
        resource.RLIMIT_AS: (address_space, address_space),  # MemoryError, not a swapping host
        # writes past it fail (EFBIG). I/O tests: the runner runs no program code and writes each
        # test's input to a memfd, so its own limit stays open; each test's process sets it.
        resource.RLIMIT_FSIZE: (RLIM_INFINITY,) * 2 if job["inputs"] else (output, output),
        resource.RLIMIT_NOFILE: (256, 256),
        resource.RLIMIT_CORE: (0, 0),
    }
    if job["mode"] == "landlock" and job["uid"] is None:  # the user's own uid: every process of theirs counts
        nproc = own_tasks() + job["max_procs"]
        limits[resource.RLIMIT_NPROC] = (nproc, nproc)
    elif job["mode"] != "none":  # counted per uid: a leased uid's, or uid 0's of the run's own user namespace
        limits[resource.RLIMIT_NPROC] = (job["max_procs"], job["max_procs"])
    for kind, value in limits.items():
        resource.setrlimit(kind, value)


def own_tasks():
    """Processes and threads of this process's real uid now (what RLIMIT_NPROC counts), from /proc: the
    Landlock tier as an ordinary user allows the run max_procs more than these (runs in parallel share them)."""
    uid, count = os.getuid(), 0
    for name in listdir("/proc"):
        if name.isdigit():
            try:
                if os.stat(f"/proc/{name}").st_uid == uid:
                    count += len(listdir(f"/proc/{name}/task"))
            except OSError:
                pass
    return count


def own_address_space():
    """Bytes of address space this fresh interpreter uses (VmSize, ~13 MiB): RLIMIT_AS's base."""
    return status_kib(b"VmSize:") * 1024


def peak_kib():
    """The most resident memory this process has had, KiB (VmHWM). Not wait4's ru_maxrss: Linux
    charges a vfork()ed child with its parent's peak -- the whole training process."""
    return status_kib(b"VmHWM:")


def status_kib(field):
    """A field of /proc/self/status in KiB: b"VmRSS:", b"VmHWM:", b"VmSize:"."""
    fd = os_open("/proc/self/status", os.O_RDONLY)
    text = read(fd, 1 << 16)
    close(fd)
    start = text.find(field)
    return int(text[start + len(field):text.find(b"kB", start)]) if start >= 0 else 0


CLK_TCK = os.sysconf("SC_CLK_TCK")


def others_cpu(keep):
    """CPU seconds (user + system, with their waited-for children) of every process this /proc shows
    but those in `keep`: in the run's pid namespace, what the program started and left running. A
    test's CPU includes them, so that work handed to a child is neither free nor unlimited."""
    total = 0
    for name in listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            try:
                fd = os_open(f"/proc/{name}/stat", os.O_RDONLY)
            except OSError:
                continue
            fields = read(fd, 4096).rsplit(b")", 1)[-1].split()
            close(fd)
            total += sum(int(x) for x in fields[11:15])  # utime, stime, cutime, cstime (clock ticks)
    return total / CLK_TCK


def kill_others(keep):
    """Kill and reap every process of the run's pid namespace but those in `keep` (after a test:
    nothing it started runs on into the next one)."""
    for name in listdir("/proc"):
        if name.isdigit() and int(name) not in keep:
            try:
                kill(int(name), 9)
            except OSError:
                pass
    try:
        while waitpid(-1, os.WNOHANG)[0]:  # ours now (pid 1 adopts orphans): the killed and the zombies
            pass
    except ChildProcessError:
        pass


def kill_tree(top):
    """SIGKILL every live process below `top` (its children, theirs, ...: /proc/<pid>/task/<tid>/children),
    pass after pass until none is left: a process killed in one pass starts no other, and one born during
    a pass is seen in the next. The Landlock tier's end of a run, where `top` (the keeper) is a subreaper,
    so that no orphan leaves the tree. Zombies are left to their parent. True when none is left."""
    for _ in range(1000):
        found, i = [top], 0
        while i < len(found):
            try:
                for tid in listdir(f"/proc/{found[i]}/task"):
                    try:
                        fd = os_open(f"/proc/{found[i]}/task/{tid}/children", os.O_RDONLY)
                        found.extend(int(c) for c in read(fd, 1 << 16).split())
                        close(fd)
                    except OSError:
                        pass
            except OSError:
                pass
            i += 1
        alive = [pid for pid in found[1:] if lives(pid)]
        if not alive:
            return True
        for pid in alive:
            try:
                kill(pid, 9)
            except OSError:
                pass
    return False


def lives(pid):
    """True while any thread of process `pid` runs. Not its state alone: a process whose first thread
    has ended by itself (the exit system call, not exit_group) reads "Z" in /proc/<pid>/stat while its
    other threads run on -- taken for a zombie, it would outlive the run."""
    try:
        tids = listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    return any(process_state(f"{pid}/task/{tid}") not in (b"Z", b"X", None) for tid in tids)


def process_state(pid):
    """The state letter of /proc/<pid>/stat (b"R", b"S", b"Z" ...), None once it is gone (`pid` may be
    "<pid>/task/<tid>": one thread's)."""
    try:
        fd = os_open(f"/proc/{pid}/stat", os.O_RDONLY)
    except OSError:
        return None
    try:
        data = read(fd, 4096)
    except OSError:  # ESRCH: it ended between the open and the read
        return None
    finally:
        close(fd)
    fields = data.rsplit(b")", 1)[-1].split()
    return fields[0] if fields else None


def redirect_stdio():
    """stdin: /dev/null (reads get EOF). stdout, stderr: one unlinked file in the working dir,
    capped by RLIMIT_FSIZE; nobody reads it, it only has to stay bounded."""
    null = os.open(os.devnull, os.O_RDONLY)
    out = os.open("output", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.unlink("output")
    for fd, target in ((null, 0), (out, 1), (out, 2)):
        os.dup2(fd, target)
    os.close(null)
    os.close(out)


def describe(e):
    """'ZeroDivisionError: division by zero', at most 300 characters."""
    return f"{type(e).__name__}: {e}"[:300]


EXACT = frozenset({type(None), bool, int, float, complex, str, bytes})
TO_BASE = ((int, int.__int__), (float, float.__float__), (complex, complex.__complex__),
           (str, str.__str__), (bytes, bytes.__bytes__))  # C methods: no subclass overrides them


def plain(value):
    """`value` rebuilt from builtin types only -- the ones marshal carries -- so that no method of
    the program's own takes part in comparing it. Subclasses become their base type (Counter ->
    dict), numpy scalars Python numbers; anything else raises TypeError.

    >>> class AlwaysEqual(int):
    ...     def __eq__(self, other): return True
    >>> plain([AlwaysEqual(2), (1.5, "x")]) == [5, (1.5, "x")]
    False
    """
    cls = type(value)
    if cls in EXACT:
        return value
    for base in (list, tuple, set, frozenset):
        if issubclass(cls, base):  # base.__iter__: the C iterator, whatever the subclass says
            return base(plain(item) for item in base.__iter__(value))
    if issubclass(cls, dict):
        return {plain(key): plain(item) for key, item in dict.items(value)}
    for base, to_base in TO_BASE:
        if issubclass(cls, base):
            return to_base(value)
    if cls.__module__ == "numpy" and getattr(value, "ndim", None) == 0:
        return plain(value.item())
    raise TypeError(f"a {cls.__name__} is not plain data")


EFBIG = 27


class Timeout(BaseException):
    """Raised inside a test when its CPU or wall-clock budget is spent. A BaseException, so that
    `except Exception` does not swallow it; a bare `except:` does, and meets RLIMIT_CPU instead."""


class Verdict(BaseException):
    """Raised in the judge when the program's process answers a call with a verdict (timeout...)."""


def guarded(fn, cpu_s, wall_s):
    """(verdict, fn()) with fn under a CPU timer (cpu_s, all threads) and a wall-clock timer
    (wall_s); an exception becomes (verdict, "Type: message")."""
    try:
        arm(cpu_s, wall_s)
        try:
            return "passed", fn()
        except AssertionError as e:
            return "failed", describe(e) if e.args else ""
        except MemoryError:
            return "memory", "MemoryError"
        except Timeout:
            return "timeout", ""
        except Verdict as e:  # the program can raise our Verdict too: never a pass (docs/sandbox.md#h2-relayed-verdict)
            failure = len(e.args) == 2 and type(e.args[0]) is str and e.args[0] in FAILURES
            return (e.args[0], str(e.args[1])[:300]) if failure else ("error", "Verdict")
        except OSError as e:  # Python ignores SIGXFSZ: a write past RLIMIT_FSIZE fails, EFBIG
            return ("output_limit", "output over the limit") if e.errno == EFBIG else ("error", describe(e))
        except BaseException as e:  # SystemExit and KeyboardInterrupt too: not a success
            return "error", describe(e)
        finally:
            disarm()
    except Timeout:  # the timer fired while describing the error (a slow __str__)
        return "timeout", ""
    except BaseException as e:
        return "error", type(e).__name__


def on_timer(signum, frame):
    disarm()
    raise Timeout()


def arm(cpu_s, wall_s):
    set_handler(SIGPROF, on_timer)  # each time: the program may have replaced them
    set_handler(SIGALRM, on_timer)
    setitimer(ITIMER_PROF, cpu_s)
    setitimer(ITIMER_REAL, wall_s)


def disarm():
    setitimer(ITIMER_PROF, 0)
    setitimer(ITIMER_REAL, 0)


def written_in_python(cls):
    """True if the class, or a base other than `object`, has methods written in Python (the
    always-equal trick needs one). re.Match, numpy arrays: False. (Py_TPFLAGS_HEAPTYPE cannot
    tell: C extension types made from a spec, such as re.Match, carry it too.)"""
    return any(isinstance(v, PYTHON_DEFINED) for k in cls.__mro__[:-1] for v in vars(k).values())


def as_data(value):
    """What a program's function returned, for the judge process: ("ok", plain data), or
    ("opaque", (class name, truth, repr)) for an object of a C class that is not data (re.Match:
    `assert f(x)` needs only its truth). An iterator arrives as a list, a numpy array as nested
    lists; an object of a class written in Python raises TypeError (it could say it is equal)."""
    try:
        return "ok", plain(value)
    except TypeError:
        cls = type(value)
        if written_in_python(cls):
            raise
    if hasattr(cls, "__next__"):
        return "ok", plain(list(value))
    if cls.__module__ == "numpy" and hasattr(value, "tolist"):
        return "ok", plain(value.tolist())
    return "opaque", (cls.__name__, bool(value), repr(value)[:200])


def is_plain(value):
    """True if `value` is made of builtin data types only (what the judge accepts from the pipe:
    marshal also carries code objects)."""
    cls = type(value)
    if cls in EXACT:
        return True
    if cls in (list, tuple, set, frozenset):
        return all(is_plain(item) for item in value)
    if cls is dict:
        return all(is_plain(k) and is_plain(v) for k, v in value.items())
    return False


def send(fd, message):
    """One marshalled message on a pipe: 8-byte length, then the bytes."""
    data = dumps(message)
    data = len(data).to_bytes(8, "little") + data
    while data:
        data = data[os.write(fd, data):]


def receive(fd):
    """The next message from send(); EOFError when the other side is gone."""
    size = int.from_bytes(read_exactly(fd, 8), "little")
    if size > FRAME_LIMIT:
        raise EOFError("message too large")
    return loads(read_exactly(fd, size))


def read_exactly(fd, n):
    chunks, left = [], n
    while left:
        chunk = os.read(fd, min(left, 1 << 20))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        left -= len(chunk)
    return b"".join(chunks)


def read_all(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
