"""The child half of the sandbox: runs ONE candidate program and its tests, reports each result.

sandbox.py starts this as `python -I -S` (isolated: no PYTHON* variables, no user site, no current
directory on sys.path; no `site`: ~5 ms less per run, site-packages are added back by hand), as
root under `unshare` (pid 1 of new pid, network and IPC namespaces), and writes one marshalled
job on its stdin. Then, in order:

  1. root: a mount namespace of our own with private tmpfs mounts, the rlimits, the run's own
     uid -- all before a byte of the program runs (not root: the rlimits only);
  2. stdin becomes /dev/null; stdout and stderr go to an unlinked file capped by RLIMIT_FSIZE;
  3. statement tests: fork the JUDGE process now, before any program code runs (judge_process);
  4. function tests: the program runs once; then every value test in a fresh namespace under its
     own timers; then we serve the judge's calls of the program's functions until it is done.
     I/O tests: for each test, fork this warm interpreter; the fork takes the input as stdin and a
     capped memfd as stdout, closes our report pipe, and runs the program as __main__ (io_test);
  5. each step is reported on the original stdout pipe as `TOKEN PEAK_KIB hex(marshal(message))`:
         ("started",)  ("loaded",)  ("load_failed", verdict, detail)  ("sandbox_error", detail)
         ("value", i, value, cpu_s, wall_s, mem_mb)   EXPR's value; the parent holds LITERAL
         ("test", i, verdict, detail, cpu_s, wall_s, mem_mb)   a test that did not pass here,
                                        or (judge's token only) a statement test's verdict
         ("io", i, status, stdout, stderr's last line, cpu_s, wall_s, mem_mb)   judged by the parent
         ("done",)                      the end marker: every test has reported (judge: its own)
TOKEN is random per run, so printed fake reports are ignored, and a test counts only once its own
report arrived, so `sys.exit(0)` or `os._exit(0)` cannot skip the rest.

Why fork per I/O test (measured on this machine, `python bench/sandbox_bench.py`): a fork of the
warm runner costs ~1 ms; a fresh `python -I -S` ~15-25 ms, and the sandbox's own set-up (namespaces,
mounts, uid) as much again. 50 tests pay that once, not 50 times. Honest: each test gets a fresh
process image of the interpreter as it was before any program code ran (nothing of test 1 is
left in test 2), the same limits, its own CPU and memory accounting (wait4).
"""
import builtins
import marshal
import os
import resource
import sys
# The program may patch builtins and modules (`builtins.exec = ...`, `marshal.dumps = ...`). All
# that this file calls once the program has started is bound to names of its own here: module
# globals are searched before builtins, so such patches cannot reach us. Rebinding our names
# through the stack (sys._getframe().f_globals) is caught by `tampered()` after the program loads.
from builtins import callable, compile, dict, eval, exec, getattr, hasattr, isinstance, list, type, vars
from builtins import AssertionError, BaseException, Exception, MemoryError, OSError, SystemExit
from marshal import dumps
from os import _exit, close, getpid, read, write
from resource import RUSAGE_SELF, getrusage
from sys import setprofile, settrace
from time import perf_counter

from _signal import ITIMER_PROF, ITIMER_REAL, SIGALRM, SIGPROF, SIG_DFL, setitimer
from _signal import signal as set_handler  # _signal: the C half of `signal`, minus its 5 ms `enum` import

from sandbox_child import (EFBIG_HINT, PR_SET_DUMPABLE, TMP_DIRS, FunctionType, as_data, describe,  # noqa: F401
                           is_plain, libc, own_address_space, peak_kib, plain, private_mounts, read_all,
                           receive, redirect_stdio, send, set_limits, status_kib)

EFBIG = 27
TAMPERED = "the program modified the sandbox runner"


class Timeout(BaseException):
    """Raised inside a test when its CPU or wall-clock budget is spent. A BaseException, so that
    `except Exception` does not swallow it; a bare `except:` does, and meets RLIMIT_CPU instead."""


class Verdict(BaseException):
    """Raised in the judge when the program's process answers a call with a verdict (timeout...)."""


def main():
    del sys.modules[__name__], sys.modules["sandbox_child"]  # out of the program's easy reach
    sys.path.pop(0)  # our own directory, put there by sandbox.py to import this file
    job = marshal.loads(read_all(0))
    report_fd, token, runner_pid = os.dup(1), job["token"].encode(), os.getpid()

    def report(*message, peak=None):
        if getpid() != runner_pid:  # a fork of the program's, running on through our loop
            return
        line = b"%s %d %s\n" % (token, peak_kib() if peak is None else peak, dumps(message).hex().encode())
        while line:
            line = line[write(report_fd, line):]

    # 1-3. The sandbox, before any of the program runs.
    try:
        if job["uid"] is not None:
            private_mounts(job["expose"])
        set_limits(job)
        clear_refs = os.open("/proc/self/clear_refs", os.O_WRONLY | os.O_CLOEXEC)  # before we drop root
        if job["uid"] is not None:
            os.setgroups([])
            os.setresgid(job["uid"], job["uid"], job["uid"])
            os.setresuid(job["uid"], job["uid"], job["uid"])
        redirect_stdio()
        sys.path.extend(job["site_dirs"])  # -S left site-packages out: put them back (numpy)
        judge_link = start_judge(job, report_fd) if job["judge"] else None
        close(job["key_fd"])  # the judge's key: never read here
    except BaseException as e:
        report("sandbox_error", describe(e))
        _exit(1)
    report("started")
    if job["inputs"]:
        io_tests(job, report, report_fd)
    else:
        function_tests(job, report, judge_link, clear_refs, runner_pid)
    report("done")
    _exit(0)  # at once: threads the program left running must not delay or change anything


def measure(clear_refs):
    """Start of a test: reset the peak RSS to the current one -> (cpu, wall, rss KiB)."""
    write(clear_refs, b"5")
    usage = getrusage(RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, perf_counter(), status_kib(b"VmRSS:")


def measured(start):
    """(cpu s, wall s, peak MiB above the start) since measure()."""
    usage, (cpu, wall, rss) = getrusage(RUSAGE_SELF), start
    return (usage.ru_utime + usage.ru_stime - cpu, perf_counter() - wall,
            max(0, status_kib(b"VmHWM:") - rss) / 1024)


def function_tests(job, report, judge_link, clear_refs, runner_pid):
    """The program once, each value test, then the judge's calls (statement tests)."""
    try:
        setup = compile(job["setup"], "<setup>", "exec", dont_inherit=True)
    except BaseException as e:
        report("load_failed", "error", f"setup: {describe(e)}")
        _exit(0)
    tests = [(i, *compile_test(i, kind, src)) for i, (kind, src) in enumerate(job["tests"]) if kind == "value"]
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

    verdict, detail = guarded(lambda: exec(compile(job["program"], "<program>", "exec",
                                                   dont_inherit=True), program), *budget)
    if verdict == "passed" and tampered():
        verdict, detail = "error", TAMPERED
    if verdict != "passed":
        report("load_failed", verdict, detail)
        _exit(0)
    report("loaded")

    for i, kind, code in tests:
        start = []

        def run_test():
            settrace(None)
            setprofile(None)
            for name, module, contents, keys in modules:  # undo patches of math.floor & co.
                sys.modules[name] = module
                namespace = vars(module)
                for key in namespace.keys() - keys:
                    del namespace[key]
                namespace.update(contents)
            ns = dict(program, __builtins__=dict(clean_builtins))  # builtins as they were
            exec(setup, ns)  # afresh per test: a helper replaced during one test is gone in the next
            start.append(measure(clear_refs))
            return plain(eval(code, ns))

        verdict, result = ("error", code) if kind == "broken" else guarded(run_test, *budget)
        timing = measured(start[0]) if start else (None, None, None)
        if getpid() != runner_pid:  # a fork of the program's: it has nothing more to do
            _exit(0)
        if tampered():
            report("test", i, "error", TAMPERED, *timing)
            _exit(0)
        if verdict == "passed":
            report("value", i, result, *timing)
        else:
            report("test", i, verdict, result or "", *timing)
    if judge_link:
        serve(program, judge_link, budget, clear_refs, runner_pid)


def serve(program, link, budget, clear_refs, runner_pid):
    """Answer the judge's calls of the program's functions: (seq, test, name, args, kwargs) ->
    (seq, kind, payload, args after the call, cpu_s, wall_s, mem_mb); each test has timeout_s of
    CPU across its calls. What we answer is the program's claim and nothing more: the judge
    compares. Ends when the judge closes its pipe."""
    calls, answers = link
    names = [(name, "call" if callable(value) and not isinstance(value, type) else "data",
              None if callable(value) else value)
             for name, value in program.items() if not name.startswith("__")]
    names = [(name, kind, value) for name, kind, value in names if kind == "call" or is_plain(value)]
    used = {}
    try:
        send(answers, ("names", names))
        while True:
            seq, i, name, args, kwargs = receive(calls)
            fn, start = program.get(name), measure(clear_refs)
            cpu_left = max(budget[0] - used.get(i, 0.0), 0.001)
            verdict, result = guarded(lambda: as_data(fn(*args, **kwargs)), cpu_left, budget[1])
            timing = measured(start)
            if getpid() != runner_pid:
                _exit(0)
            used[i] = used.get(i, 0.0) + timing[0]
            if verdict == "passed":
                after = None
                if any(type(a) in (list, dict, set) for a in args):  # mutated in place: show the judge
                    try:
                        after = plain(args)
                    except BaseException:
                        after = None
                answer = (seq, *result, after)
            else:
                answer = (seq, "verdict", (verdict, result or ""), None)
            send(answers, (*answer, *timing))
    except (EOFError, OSError):
        pass


def start_judge(job, report_fd):
    """Fork the judge process before any program code runs -> (calls, answers) pipe ends here."""
    calls_r, calls_w = os.pipe()
    answers_r, answers_w = os.pipe()
    if os.fork() == 0:
        close(calls_r)
        close(answers_w)
        judge_process(job, report_fd, calls_w, answers_r)
    close(calls_w)
    close(answers_r)
    return calls_r, answers_w


def judge_process(job, report_fd, calls, answers):
    """Run each statement test (HumanEval's check(candidate), `assert math.isclose(f(1), 2.5)`)
    where no program code ever ran. Names the program defined are stubs here: calling one sends
    its arguments to the program's process and returns what came back, as plain data (or an
    opaque stand-in with the truth of a C object, such as a re.Match). The job (setup, tests, our
    token) arrives sealed; its key only on a pipe that the program's process closed unread, and
    this process is not dumpable: the program can neither read our memory nor ptrace us."""
    libc("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    key = read_all(job["key_fd"])
    close(job["key_fd"])
    import _sha3
    sealed = job["judge"]
    pad = _sha3.shake_256(key).digest(len(sealed))
    mine = marshal.loads((int.from_bytes(sealed, "little") ^ int.from_bytes(pad, "little")).to_bytes(len(sealed), "little"))
    del job, key, pad
    token = mine["token"].encode()

    def report(*message):
        line = b"%s 0 %s\n" % (token, dumps(message).hex().encode())  # < PIPE_BUF: one atomic write
        while line:
            line = line[write(report_fd, line):]

    budget = (mine["timeout_s"], mine["wall_s"] + 1.0)  # the program's process times its calls first
    try:
        _, names = receive(answers)
    except BaseException:
        _exit(0)  # the program never loaded: the parent has its report
    seq, current, spent = [0], [0], [0.0, 0.0, 0.0]

    def stub(name):
        def call(*args, **kwargs):
            seq[0] += 1
            args_list = list(args)
            try:
                send(calls, (seq[0], current[0], name, tuple(args), kwargs))
            except ValueError:
                raise TypeError(f"{name}(): an argument is not plain data") from None
            while True:
                answer = receive(answers)
                if answer[0] == seq[0]:
                    break
            _, kind, payload, after, cpu, wall, mem = answer
            spent[0], spent[1], spent[2] = spent[0] + cpu, spent[1] + wall, max(spent[2], mem)
            if kind == "verdict":
                raise Verdict(*payload)
            if after is not None and is_plain(after):
                for old, new in zip(args_list, after):
                    if type(old) is type(new) and type(old) in (list, dict, set):
                        old.clear()
                        old.update(new) if type(old) is not list else old.extend(new)
            if kind == "opaque":
                return Opaque(*payload)
            if not is_plain(payload):
                raise TypeError(f"{name} returned something that is not plain data")
            return payload
        call.__name__ = name
        return call

    program = {name: stub(name) if kind == "call" else value for name, kind, value in names}
    for name in mine["modules"]:  # `assert math.isclose(f(1), 2.5)` with `math` from the program's imports
        try:
            __import__(name)
            program.setdefault(name.partition(".")[0], sys.modules[name.partition(".")[0]])
        except BaseException:
            pass
    for i, src in mine["tests"]:
        current[0], spent[:] = i, [0.0, 0.0, 0.0]

        def run_test():
            ns = dict(program, __builtins__=builtins)
            exec(compile(mine["setup"], "<setup>", "exec", dont_inherit=True), ns)
            exec(compile(src, f"<test {i + 1}>", "exec", dont_inherit=True), ns)

        verdict, detail = guarded(run_test, *budget)
        report("test", i, verdict, str(detail or "")[:300], *spent)
    report("done")
    _exit(0)


class Opaque:
    """The judge's stand-in for a C object that is not data (a re.Match): its truth and repr."""

    def __init__(self, name, truth, text):
        self.name, self.truth, self.text = name, truth, text

    def __bool__(self):
        return bool(self.truth)

    def __repr__(self):
        return str(self.text)


def io_tests(job, report, report_fd):
    """Compile once; each test in a fork of this warm runner (module docstring: why)."""
    try:
        code = compile(job["program"], "<program>", "exec", dont_inherit=True)
    except BaseException as e:
        report("load_failed", "error", describe(e))
        _exit(0)
    report("loaded")
    inputs, job["inputs"] = job["inputs"], None
    for i in range(len(inputs)):
        data, inputs[i] = inputs[i], None  # what the next forks copy shrinks as we go
        status, stdout, tail, timing, peak = io_test(code, data, job, report_fd)
        report("io", i, status, stdout, tail, *timing, peak=max(peak, peak_kib()))


def io_test(code, data, job, report_fd):
    """One I/O test -> (status, stdout, stderr's last line, (cpu, wall, mem), peak KiB). status:
    "exited N", "killed by SIGX", or a verdict (timeout, memory, output_limit)."""
    cap, timeout = job["output_bytes"], job["timeout_s"]
    stdin, stdout, stderr = (os.memfd_create(name, os.MFD_CLOEXEC) for name in ("stdin", "stdout", "stderr"))
    view = memoryview(data)
    while view:
        view = view[write(stdin, view):]
    os.lseek(stdin, 0, 0)
    started_r, started_w = os.pipe()
    wall = perf_counter()
    pid = os.fork()
    if pid == 0:
        close(started_r)
        io_child(code, job, (stdin, stdout, stderr), report_fd, started_w, cap, timeout)
    close(started_w)
    pidfd = os.pidfd_open(pid)
    import select
    timed_out = not select.select([pidfd], [], [], job["wall_s"])[0]
    close(pidfd)
    if timed_out:
        os.kill(pid, 9)
    _, status, usage = os.wait4(pid, 0)
    wall = perf_counter() - wall
    kill_rest(job, pid)
    begun = read(started_r, 64).split()
    close(started_r)
    cpu0, rss0 = (float(begun[0]), int(begun[1])) if len(begun) == 2 else (0.0, 0)
    size = os.fstat(stdout).st_size
    out = os.pread(stdout, cap, 0)
    err_size = os.fstat(stderr).st_size
    err = os.pread(stderr, 4096, max(0, err_size - 4096)).decode(errors="replace").strip().splitlines()
    tail = err[-1][:300] if err else ""
    for fd in (stdin, stdout, stderr):
        close(fd)
    cpu = usage.ru_utime + usage.ru_stime
    timing = (max(0.0, cpu - cpu0), wall, max(0, usage.ru_maxrss - rss0) / 1024)
    if timed_out:
        return "timeout", b"", f"over the wall-clock limit ({job['wall_s']} s)", timing, usage.ru_maxrss
    if os.WIFSIGNALED(status):
        sig = os.WTERMSIG(status)
        if sig in (SIGPROF, 24) or (sig == 9 and cpu >= timeout):  # SIGPROF timer, SIGXCPU, RLIMIT_CPU
            verdict = "timeout"
        elif sig == 25:  # SIGXFSZ
            verdict = "output_limit"
        else:
            import signal
            verdict = f"killed by {signal.Signals(sig).name}"
        return verdict, b"", tail, timing, usage.ru_maxrss
    if size >= cap or EFBIG_HINT in tail:
        return "output_limit", b"", f"output over {cap >> 20} MiB", timing, usage.ru_maxrss
    code_ = os.WEXITSTATUS(status)
    if code_ != 0 and tail.startswith("MemoryError"):
        return "memory", b"", tail, timing, usage.ru_maxrss
    return f"exited {code_}", out, tail, timing, usage.ru_maxrss


def kill_rest(job, pid):
    """After an I/O test: whatever its process started dies too, so nothing prints into the
    next test. As the run's own uid (root): kill(-1) reaches every process of that uid but us --
    setsid() or not; we are pid 1, so we reap them. Not root: its process group only."""
    try:
        if job["uid"] is not None and not job["judge"]:
            os.kill(-1, 9)
            while True:
                os.waitpid(-1, 0)
        else:
            os.killpg(pid, 9)
    except OSError:
        pass


def io_child(code, job, fds, report_fd, started_w, cap, timeout):
    """The forked test process: stdio in place, our report pipe closed, the limits of one test,
    then the program as __main__; exit with its status (an exception: its traceback, status 1)."""
    try:
        os.setpgid(0, 0)
        for fd, target in zip(fds, (0, 1, 2)):
            os.dup2(fd, target)
            close(fd)
        close(report_fd)
        set_handler(SIGPROF, SIG_DFL)
        cpu = int(timeout) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (cap, cap))
        address_space = min(own_address_space() + job["memory_mb"] * 2**20, resource.getrlimit(resource.RLIMIT_AS)[1])
        resource.setrlimit(resource.RLIMIT_AS, (address_space, address_space))
        usage = getrusage(RUSAGE_SELF)
        write(started_w, b"%f %d" % (usage.ru_utime + usage.ru_stime, status_kib(b"VmRSS:")))
        close(started_w)
        setitimer(ITIMER_PROF, timeout)  # SIGPROF's default action ends the process
    except BaseException:
        _exit(125)
    status = 0
    try:
        exec(code, {"__name__": "__main__", "__builtins__": builtins})
    except SystemExit as e:
        status = e.code if type(e.code) is int else (0 if e.code is None else 1)
        if e.code is not None and type(e.code) is not int:
            sys.stderr.write(f"{e.code}\n")
    except BaseException as e:
        sys.__excepthook__(type(e), e, e.__traceback__)
        status = 1
    try:
        threading = sys.modules.get("threading")
        if threading is not None:
            threading._shutdown()  # as at a normal exit: wait for the program's threads
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        try:
            stream.flush()
        except BaseException:
            status = status or 1
    _exit(status & 0xFF)


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
        except Verdict as e:
            return e.args[0], e.args[1]
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
