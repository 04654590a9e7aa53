"""The child half of the sandbox: runs ONE candidate program and its tests, reports each result.

sandbox.py starts this as `python -I -S` (isolated: no PYTHON* variables, no user site, no current
directory on sys.path; no `site`: ~5 ms less per run, site-packages are added back by hand), as
root under `unshare` (pid 1 of new pid, network and IPC namespaces), and writes one marshalled
job on its stdin. Then, in order:

  1. root: a mount namespace of our own with private tmpfs mounts, the rlimits, the run's own
     uid -- all before a byte of the program runs (not root: the rlimits only);
  2. stdin becomes /dev/null; stdout and stderr go to an unlinked file capped by RLIMIT_FSIZE;
  3. the program runs once; then every test runs in a fresh namespace under its own timers;
  4. each step is reported on the original stdout pipe as `TOKEN PEAK_KIB hex(marshal(message))`:
         ("started",)  ("loaded",)  ("load_failed", verdict, detail)  ("sandbox_error", detail)
         ("test", i, verdict, detail)   a statement test, judged here
         ("value", i, value)            `assert EXPR == LITERAL`: EXPR's value, judged by the
                                        parent; this process never sees LITERAL
         ("done",)                      the end marker: every test has reported
TOKEN is random per run, so printed fake reports are ignored, and a test counts only once its own
report arrived, so `sys.exit(0)` or `os._exit(0)` cannot skip the rest.
Only cheap stdlib modules here: their import time is paid on every run.
"""
import builtins
import marshal
import os
import resource
import sys
# The program may patch builtins and modules (`builtins.exec = ...`, `marshal.dumps = ...`). All
# that this file calls once the program has started is bound to names of its own here: module
# globals are searched before builtins, so such patches cannot reach us. Rebinding our names
# through the stack (sys._getframe().f_globals) is caught by `tampered()` after every step.
from builtins import compile, dict, eval, exec, getattr, hasattr, issubclass, map, type, vars
from builtins import AssertionError, BaseException, MemoryError, OSError, TypeError
from marshal import dumps
from os import _exit, close, getpid, read, write
from os import open as os_open
from sys import setprofile, settrace

from _signal import ITIMER_PROF, ITIMER_REAL, SIGALRM, SIGPROF, setitimer
from _signal import signal as set_handler  # _signal: the C half of `signal`, minus its 5 ms `enum` import

CLONE_NEWNS = 0x00020000
MS_NOSUID, MS_NODEV, MS_NOEXEC, MS_BIND, MS_REC, MS_PRIVATE = 2, 4, 8, 4096, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS, EFBIG = 38, 27
TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable: each gets a fresh private tmpfs
PYTHON_CLASS = 1 << 9  # Py_TPFLAGS_HEAPTYPE: the class was written in Python, not in C
FunctionType = type(lambda: None)
TAMPERED = "the program modified the sandbox runner"


class Timeout(BaseException):
    """Raised inside a test when its CPU or wall-clock budget is spent. A BaseException, so that
    `except Exception` does not swallow it; a bare `except:` does, and meets RLIMIT_CPU instead."""


def main():
    del sys.modules[__name__]  # out of the program's easy reach
    sys.path.pop(0)  # our own directory, put there by sandbox.py to import this file
    job = marshal.loads(read_all(0))
    report_fd, token, runner_pid = os.dup(1), job["token"].encode(), os.getpid()

    def report(*message):
        if getpid() != runner_pid:  # a fork of the program's, running on through our loop
            return
        line = b"%s %d %s\n" % (token, peak_kib(), dumps(message).hex().encode())
        while line:
            line = line[write(report_fd, line):]

    # 1-2. The sandbox, before any of the program runs.
    try:
        if job["uid"] is not None:
            private_mounts(job["expose"])
        set_limits(job)
        if job["uid"] is not None:
            os.setgroups([])
            os.setresgid(job["uid"], job["uid"], job["uid"])
            os.setresuid(job["uid"], job["uid"], job["uid"])
        redirect_stdio()
        sys.path.extend(job["site_dirs"])  # -S left site-packages out: put them back (numpy)
    except BaseException as e:
        report("sandbox_error", describe(e))
        _exit(1)
    report("started")

    # 3. Compile the setup and tests, and take note of what the program must not change.
    try:
        setup = compile(job["setup"], "<setup>", "exec", dont_inherit=True)
    except BaseException as e:
        report("load_failed", "error", f"setup: {describe(e)}")
        _exit(0)
    tests = tuple(compile_test(i, kind, src) for i, (kind, src) in enumerate(job["tests"]))
    modules = import_clean(job["modules"])  # before the program can patch them
    clean_builtins = tuple(vars(builtins).items())
    program = {"__name__": "solution", "__builtins__": builtins}  # not __main__: demo code stays off
    budget = (job["timeout_s"], job["wall_s"])
    runner = globals()

    def tampered():  # no builtins used here: the program may have replaced them
        if runner.keys() != own_keys:  # a new name would shadow a builtin we use
            return True
        for name, value in own_names:
            if runner.get(name) is not value:
                return True
        for f, code in own_code:
            if f.__code__ is not code:
                return True
        return False

    own_names, own_keys = tuple(runner.items()), frozenset(runner)
    own_code = tuple((f, f.__code__) for _, f in own_names + ((0, report), (0, tampered))
                     if type(f) is FunctionType)

    # The program, once; then each test, each reported as soon as it ends.
    verdict, detail = guarded(lambda: exec(compile(job["program"], "<program>", "exec",
                                                   dont_inherit=True), program), *budget)
    if verdict == "passed" and tampered():
        verdict, detail = "error", TAMPERED
    if verdict != "passed":
        report("load_failed", verdict, detail)
        _exit(0)
    report("loaded")

    for i, (kind, code) in enumerate(tests):
        def run_test():
            settrace(None)
            setprofile(None)
            for name, module, contents, keys in modules:  # undo patches of math.isclose & co.
                sys.modules[name] = module
                namespace = vars(module)
                for key in namespace.keys() - keys:
                    del namespace[key]
                namespace.update(contents)
            ns = dict(program, __builtins__=dict(clean_builtins))  # builtins as they were
            if kind == "statement":  # the program's results meet the test's own `==`: launder them
                ns.update((name, honest(f)) for name, f in program.items()
                          if type(f) is FunctionType or type(f).__name__ == "_lru_cache_wrapper")
            exec(setup, ns)  # afresh per test: a helper replaced during one test is gone in the next
            if kind == "value":
                return plain(eval(code, ns))
            exec(code, ns)

        verdict, result = ("error", code) if kind == "broken" else guarded(run_test, *budget)
        if tampered():
            report("test", i, "error", TAMPERED)
            _exit(0)
        if verdict == "passed" and kind == "value":
            report("value", i, result)
        else:
            report("test", i, verdict, result or "")
    report("done")
    _exit(0)  # at once: threads the program left running must not delay or change anything


def private_mounts(expose):
    """Root only. Mounts in a mount namespace of our own, made right here and made private first:
    whatever started us, nothing we mount can reach the host; the kernel drops it all at the end."""
    libc("unshare", CLONE_NEWNS)
    libc("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
    if os.getpid() == 1:  # pid 1 of the run's pid namespace: a /proc that shows only the run
        libc("mount", b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None)
    # Each of TMP_DIRS (the working dir: nothing written there outlives the run), and each
    # directory others may not enter that holds our interpreter (e.g. /root, 0700), is covered by
    # an empty tmpfs; what `expose` names under it (the interpreter's tree, a venv or this
    # project in /tmp) is bind-mounted back in place, from a handle opened before the cover.
    shown = dict(expose)  # {covered dir: [paths under it to show again]}
    for path in [*TMP_DIRS, *(p for p in shown if p not in TMP_DIRS)]:
        if not os.path.isdir(path):
            continue
        keeps = shown.get(path, [])
        handles = [os.open(keep, os.O_PATH | os.O_CLOEXEC) for keep in keeps]
        options = b"size=64m,mode=1777" if path in TMP_DIRS else b"mode=755"
        libc("mount", b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, options)
        for keep, fd in zip(keeps, handles):
            os.makedirs(keep, exist_ok=True)
            libc("mount", f"/proc/self/fd/{fd}".encode(), keep.encode(), None, MS_BIND | MS_REC, None)
            os.close(fd)
    os.chdir("/tmp")
    libc("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries gain nothing


def libc(name, *args):
    """Call a C library function with int / bytes / None arguments. Through _ctypes, the C half
    of ctypes: importing all of ctypes would cost ~7 ms on every run, a quarter of it."""
    import _ctypes
    if _ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None), name), args) != 0:
        raise OSError(f"{name}{args} failed (needs root with CAP_SYS_ADMIN)")


def set_limits(job):
    """The rlimits of the run; every process it starts inherits them. Numbers: see sandbox.py."""
    cpu, output = job["cpu_limit_s"], job["output_bytes"]
    address_space = own_address_space() + job["memory_mb"] * 2**20
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu),  # SIGKILL at `cpu` s (as pid 1 we would ignore SIGXCPU)
        resource.RLIMIT_AS: (address_space, address_space),  # MemoryError, not a swapping host
        resource.RLIMIT_FSIZE: (output, output),  # writes past it fail (EFBIG)
        resource.RLIMIT_NOFILE: (256, 256),
        resource.RLIMIT_CORE: (0, 0),
    }
    if job["uid"] is not None:  # counted per uid: meaningful only for a uid of our own
        limits[resource.RLIMIT_NPROC] = (job["max_procs"], job["max_procs"])
    for kind, value in limits.items():
        resource.setrlimit(kind, value)


def own_address_space():
    """Bytes of address space this fresh interpreter uses (VmSize, ~13 MiB): RLIMIT_AS's base."""
    return status_kib(b"VmSize:") * 1024


def peak_kib():
    """The most resident memory this process has had, KiB (VmHWM). Not wait4's ru_maxrss: Linux
    charges a vfork()ed child with its parent's peak -- the whole training process."""
    return status_kib(b"VmHWM:")


def status_kib(field):
    fd = os_open("/proc/self/status", os.O_RDONLY)
    text = read(fd, 1 << 16)
    close(fd)
    start = text.find(field)
    return int(text[start + len(field):text.find(b"kB", start)]) if start >= 0 else 0


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


def compile_test(i, kind, src):
    """(kind, code object); ("broken", "SyntaxError: ...") for a test that does not compile."""
    try:
        return kind, compile(src, f"<test {i + 1}>", "eval" if kind == "value" else "exec", dont_inherit=True)
    except BaseException as e:
        return "broken", describe(e)


def import_clean(names):
    """Import the modules the setup and tests use; remember their contents, to restore them."""
    modules = []
    for name in names:
        try:
            __import__(name)
        except BaseException:  # a missing module: the test itself will say so
            continue
        contents = tuple(vars(sys.modules[name]).items())
        modules.append((name, sys.modules[name], contents, frozenset(key for key, _ in contents)))
    return tuple(modules)


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


def honest(fn):
    """`fn` (a function of the program's) for statement tests such as HumanEval's
    check(candidate): its results go through plain(), so the test compares plain data (a Counter
    arrives as a dict, a namedtuple as a tuple). A result that is not plain data passes unchanged
    if its class is written in C (a numpy array), is refused if the class is written in Python
    (the always-equal trick); an iterator is passed on lazily, each item checked the same way."""
    def check(value):
        try:
            return plain(value)
        except TypeError:
            cls = type(value)
            if cls.__flags__ & PYTHON_CLASS:
                raise TypeError(f"{fn.__name__} returned a {cls.__name__}, not plain data") from None
            return map(check, value) if hasattr(cls, "__next__") else value

    def call(*args, **kwargs):
        return check(fn(*args, **kwargs))
    call.__name__ = fn.__name__
    return call


def read_all(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
