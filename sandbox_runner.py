"""The child half of the sandbox: runs ONE candidate program and its tests, reports each result.

sandbox.py starts this as `python -I -S` (isolated mode: no PYTHON* variables, no user site, no
current directory on sys.path; no `site`, which saves ~5 ms per run) and writes one marshalled job
on its stdin. Then, in order:

  1. as root: private mount, network and IPC namespaces, rlimits, drop to the run's own uid --
     all before a single byte of the candidate runs (not root: only the rlimits);
  2. stdin becomes /dev/null; stdout and stderr go to an unlinked file capped by RLIMIT_FSIZE;
  3. the program runs once; then every test runs in a fresh namespace under its own timers;
  4. each step is reported on the original stdout pipe as a line `TOKEN hex(marshal(message))`:
         ("started",)  ("loaded",)  ("load_failed", verdict, detail)  ("sandbox_error", detail)
         ("test", i, verdict, detail)   a statement test, judged here
         ("value", i, value)            an `assert EXPR == LITERAL` test: EXPR's value, judged by
                                        the parent; this process never sees LITERAL
         ("done",)                      the end marker: every test has reported
TOKEN is random per run, so printing a fake report does not work; and a test only counts once
its own report arrived, so `sys.exit(0)` or `os._exit(0)` cannot skip the rest.
Only the stdlib, and only cheap modules: this import cost is paid on every run.
"""
import builtins
import marshal
import os
import resource
import sys
# The program may patch builtins and modules (`builtins.exec = ...`, `marshal.dumps = ...`). What
# this file calls once the program has started is bound to names of its own here; module globals
# are searched before builtins, so those patches cannot reach us. Rebinding these names through
# the stack (sys._getframe().f_globals) is caught by the check after every test, in main().
from builtins import compile, dict, eval, exec, getattr, hasattr, issubclass, map, type, vars
from marshal import dumps
from os import _exit, write
from sys import setprofile, settrace

from _signal import ITIMER_PROF, ITIMER_REAL, SIGALRM, SIGKILL, SIGPROF, setitimer
from _signal import signal as set_handler  # _signal: the C half of `signal`, minus its 5 ms `enum` import

CLONE_NEWNS, CLONE_NEWIPC, CLONE_NEWNET = 0x00020000, 0x08000000, 0x40000000
MS_NOSUID, MS_NODEV, MS_BIND, MS_MOVE, MS_REC, MS_PRIVATE = 2, 4, 4096, 8192, 16384, 1 << 18
PR_SET_NO_NEW_PRIVS = 38
EFBIG = 27  # errno: file too large
TMP_DIRS = ("/tmp", "/var/tmp", "/dev/shm")  # world-writable: each gets a fresh private tmpfs
TMPFS_OPTIONS = b"size=64m,mode=1777"
PYTHON_CLASS = 1 << 9  # Py_TPFLAGS_HEAPTYPE: the class was written in Python, not C
FunctionType = type(lambda: None)


class Timeout(BaseException):
    """Raised inside a test when its CPU or wall-clock budget is spent. A BaseException, so that
    `except Exception` in the program does not swallow it (a bare `except:` does: see RLIMIT_CPU)."""


def main():
    del sys.modules[__name__]  # out of the program's easy reach
    sys.path.pop(0)  # our own directory, put there by sandbox.py to import this file
    job = marshal.loads(read_all(0))
    report_fd, token = os.dup(1), job["token"].encode()

    def report(*message):
        line = token + b" " + dumps(message).hex().encode() + b"\n"
        while line:
            line = line[write(report_fd, line):]

    try:
        if job["uid"] is not None:
            enter_namespaces(job["expose"])
        set_limits(job)
        if job["uid"] is not None:
            os.setgroups([])
            os.setresgid(job["uid"], job["uid"], job["uid"])
            os.setresuid(job["uid"], job["uid"], job["uid"])
            os.kill(-1, SIGKILL)  # leftovers of an earlier run under this uid, if any
        redirect_stdio()
        sys.path.extend(job["site_dirs"])  # -S left site-packages out: put them back (numpy)
    except BaseException as e:
        report("sandbox_error", describe(e))
        _exit(1)
    report("started")
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
    runner = globals()  # checked after every step: our names, and our functions' code

    def tampered():
        for name, value in own:
            if runner.get(name) is not value:
                return True
        for f, code in own_code:
            if f.__code__ is not code:
                return True
        return False

    own = tuple(runner.items())
    own_code = tuple((f, f.__code__) for _, f in own + (("", report), ("", tampered)) if type(f) is FunctionType)

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
            if kind == "statement":  # its results meet the test's own `==`: make them honest
                ns.update((name, honest(f)) for name, f in program.items() if type(f) is FunctionType)
            exec(setup, ns)  # fresh per test: a helper replaced during one test is gone in the next
            if kind == "value":
                return plain(eval(code, ns))
            exec(code, ns)
            return None

        verdict, result = guarded(run_test, *budget) if kind != "broken" else ("error", code)
        if tampered():
            report("test", i, "error", TAMPERED)
            _exit(0)
        if verdict == "passed" and kind == "value":
            report("value", i, result)
        else:
            report("test", i, verdict, result or "")
    report("done")
    _exit(0)  # now: threads the program left running must not delay or alter anything


TAMPERED = "the program modified the sandbox runner"


def compile_test(i, kind, src):
    """(kind, code object); ("broken", "SyntaxError: ...") for a test that does not compile."""
    try:
        return kind, compile(src, f"<test {i + 1}>", "eval" if kind == "value" else "exec", dont_inherit=True)
    except BaseException as e:
        return "broken", describe(e)


def enter_namespaces(expose):
    """Root only. Private mount, network and IPC namespaces: the kernel drops them, with every
    tmpfs below, when the run's last process exits. Mounts made here are invisible to the host."""
    libc("unshare", CLONE_NEWNS | CLONE_NEWNET | CLONE_NEWIPC)  # NEWNET: no network at all
    libc("mount", None, b"/", None, MS_REC | MS_PRIVATE, None)
    for path in TMP_DIRS:  # the working dir, and nothing written there outlives the run
        if os.path.isdir(path):
            libc("mount", b"tmpfs", path.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, TMPFS_OPTIONS)
    # A directory others may not enter (e.g. /root, 0700) that holds the interpreter: cover it
    # with an empty tmpfs that shows only the interpreter's own tree, bind-mounted back in place.
    for private, keeps in expose:
        stages = [f"/tmp/.keep{n}" for n in range(len(keeps))]
        for keep, stage in zip(keeps, stages):
            os.mkdir(stage)
            libc("mount", keep.encode(), stage.encode(), None, MS_BIND | MS_REC, None)
        libc("mount", b"tmpfs", private.encode(), b"tmpfs", MS_NOSUID | MS_NODEV, b"mode=755")
        for keep, stage in zip(keeps, stages):
            os.makedirs(keep, exist_ok=True)
            libc("mount", stage.encode(), keep.encode(), None, MS_MOVE, None)
            os.rmdir(stage)
    os.chdir("/tmp")
    libc("prctl", PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)  # setuid binaries gain nothing


def libc(name, *args):
    """Call a C library function with int / bytes / None arguments. Through _ctypes, the C half
    of ctypes: importing all of ctypes would cost ~7 ms on every run, a quarter of it."""
    import _ctypes
    if _ctypes.call_function(_ctypes.dlsym(_ctypes.dlopen(None), name), args) != 0:
        raise OSError(f"{name}{args} failed (needs root with CAP_SYS_ADMIN)")


def set_limits(job):
    """The rlimits of the run; they hold for every process it starts. See sandbox.py for the numbers."""
    cpu = job["cpu_limit_s"]
    address_space = own_address_space() + job["memory_mb"] * 2**20
    limits = {
        resource.RLIMIT_CPU: (cpu, cpu + 1),  # SIGXCPU at `cpu` s; SIGKILL one second later
        resource.RLIMIT_AS: (address_space, address_space),  # MemoryError, not a swapping host
        resource.RLIMIT_FSIZE: (job["output_bytes"], job["output_bytes"]),  # SIGXFSZ past the cap
        resource.RLIMIT_NOFILE: (256, 256),
        resource.RLIMIT_CORE: (0, 0),
    }
    if job["uid"] is not None:  # counted per uid, so only meaningful for a uid of our own
        limits[resource.RLIMIT_NPROC] = (job["max_procs"], job["max_procs"])
    for kind, value in limits.items():
        resource.setrlimit(kind, value)


def own_address_space():
    """Bytes of address space this interpreter uses now (VmSize): the base of RLIMIT_AS."""
    with open("/proc/self/status", "rb") as f:
        for line in f:
            if line.startswith(b"VmSize:"):
                return int(line.split()[1]) * 1024
    return 0


def redirect_stdio():
    """stdin: /dev/null (reads get EOF). stdout, stderr: one unlinked file in the working dir,
    capped by RLIMIT_FSIZE; nobody reads it, it only has to stay bounded."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    out = os.open("output", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.unlink("output")
    os.dup2(out, 1)
    os.dup2(out, 2)
    os.close(null)
    os.close(out)


def import_clean(names):
    """Import the modules the setup and tests use, and remember their contents."""
    modules = []
    for name in names:
        try:
            __import__(name)
        except BaseException:  # a missing module: the test itself will say so
            continue
        contents = tuple(vars(sys.modules[name]).items())
        modules.append((name, sys.modules[name], contents, frozenset(k for k, _ in contents)))
    return tuple(modules)


def guarded(fn, cpu_s, wall_s):
    """(verdict, fn()) with fn run under a CPU timer (cpu_s, all threads) and a wall timer
    (wall_s); an exception becomes (verdict, "Type: message")."""
    try:
        arm(cpu_s, wall_s)
        try:
            return "passed", fn()
        except AssertionError as e:
            return "failed", describe(e) if e.args else ""
        except MemoryError:
            return "memory", "MemoryError"
        except OSError as e:  # Python ignores SIGXFSZ: a write past RLIMIT_FSIZE fails with EFBIG
            return ("output_limit", "output over the limit") if e.errno == EFBIG else ("error", describe(e))
        except Timeout:
            return "timeout", ""
        except BaseException as e:  # SystemExit, KeyboardInterrupt included: not a success
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
    set_handler(SIGPROF, on_timer)  # again each time: the program may have replaced them
    set_handler(SIGALRM, on_timer)
    setitimer(ITIMER_PROF, cpu_s)
    setitimer(ITIMER_REAL, wall_s)


def disarm():
    setitimer(ITIMER_PROF, 0)
    setitimer(ITIMER_REAL, 0)


def describe(e):
    """'ZeroDivisionError: division by zero' (at most 300 characters)."""
    return f"{type(e).__name__}: {e}"[:300]


EXACT = frozenset({type(None), bool, int, float, complex, str, bytes})
TO_BASE = ((int, int.__int__), (float, float.__float__), (complex, complex.__complex__),
           (str, str.__str__), (bytes, bytes.__bytes__))  # C methods: a subclass cannot override them


def plain(value):
    """`value` rebuilt from builtin types only -- the ones marshal carries -- so that no method of
    the program's own can take part in comparing it. Subclasses become their base type, numpy
    scalars Python numbers; anything else raises TypeError.

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
    """`fn` for statement tests (e.g. HumanEval's check(candidate)): each result goes through
    plain(). A result that is not plain data passes unchanged if its class is written in C (a
    numpy array); an instance of a Python class is refused -- that is the always-equal trick.
    An iterator is passed on lazily, each item checked the same way."""
    def check(value):
        try:
            return plain(value)
        except TypeError:
            cls = type(value)
            if cls.__flags__ & PYTHON_CLASS:
                raise TypeError(f"{fn.__name__} returned a {cls.__name__} (a Python class), not plain data")
            if hasattr(cls, "__next__"):
                return map(check, value)
            return value

    def call(*args, **kwargs):
        return check(fn(*args, **kwargs))
    call.__name__ = fn.__name__
    return call


def read_all(fd):
    chunks = []
    while chunk := os.read(fd, 1 << 20):
        chunks.append(chunk)
    return b"".join(chunks)
