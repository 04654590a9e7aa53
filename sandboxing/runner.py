"""The child half of the sandbox: runs ONE candidate program and its tests, reports each result.

sandbox.py starts this as `python -I -S` (isolated: no PYTHON* variables, no user site, no current
directory on sys.path; no `site`: ~5 ms less per run, site-packages are added back by hand), under
`unshare` (pid 1 of new pid, network and IPC namespaces; in `user` mode inside a user namespace of
its own), and writes on its stdin this file's code with its siblings' (process.BOOT) and
one marshalled job. Then, in order:

  1. isolated modes: a mount namespace of our own (confine.py: the filesystem read-only,
     private tmpfs mounts, covers); then the rlimits; then the program's identity (a leased uid,
     or no capability at all) -- all before a byte of the program runs;
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
         ("coverage", lines)            job["coverage"] only: the program's lines that ran (data for
                                        StepCoder's loss mask, never part of a verdict)
TOKEN is random per run, so printed fake reports are ignored, and a test counts only once its own
report arrived, so `sys.exit(0)` or `os._exit(0)` cannot skip the rest.

Why a fork per I/O test, with the figures: io_tests.py.
"""
import builtins
import os
import sys

# The program may patch builtins and modules (`builtins.exec = ...`, `marshal.dumps = ...`). All
# that this file calls once the program has started is bound to names of its own here: module
# globals are searched before builtins, so such patches cannot reach us. Rebinding our names
# through the stack (sys._getframe().f_globals) is caught by `tampered()` after the program loads.
from builtins import BaseException, Exception, callable, compile, dict, eval, exec, isinstance, list, next, type, vars
from marshal import dumps
from os import _exit, close, getpid, write
from resource import RUSAGE_CHILDREN, RUSAGE_SELF, getrusage
from sys import setprofile, settrace
from time import perf_counter

from sandboxing.child import (
    FunctionType,
    as_data,
    describe,
    guarded,
    is_plain,
    kill_others,
    others_cpu,
    peak_kib,
    plain,
    receive,
    redirect_stdio,
    send,
    set_limits,
    status_kib,
)
from sandboxing.confine import ISOLATED, drop_privileges, limit_namespaces, private_mounts
from sandboxing.io_tests import io_tests
from sandboxing.judge_process import start_judge
from sandboxing.landlock import keep as keeper
from sandboxing.landlock import restrict
from sandboxing.seccomp import refuse

TAMPERED = "the program modified the sandbox runner"


def main(job):
    for name in (__name__, "sandboxing.child", "sandboxing.confine", "sandboxing.seccomp", "sandboxing.io_tests",
                 "sandboxing.judge_process", "sandboxing.landlock"):
        del sys.modules[name]  # out of the program's easy reach
    report_fd, token, runner_pid = os.dup(1), job["token"].encode(), os.getpid()

    def report(*message, peak=None):
        if getpid() != runner_pid:  # a fork of the program's, running on through our loop
            return
        line = b"%s %d %s\n" % (token, peak_kib() if peak is None else peak, dumps(message).hex().encode())
        while line:
            line = line[write(report_fd, line):]

    # 1-3. The sandbox, before any of the program runs.
    try:
        join_cgroups(job)
        if job["mode"] == "landlock":  # no pid namespace: a keeper above us holds every orphan (landlock.py)
            keeper(job)
            runner_pid = os.getpid()
        if job["mode"] in ISOLATED:
            private_mounts(job)
            limit_namespaces(job)
        set_limits(job)
        clear_refs = os.open("/proc/self/clear_refs", os.O_WRONLY | os.O_CLOEXEC)  # before we drop root
        drop_privileges(job)
        if job["mode"] == "landlock":
            restrict(job)
        redirect_stdio()
        sys.path.extend(job["site_dirs"])  # -S left site-packages out: put them back (numpy)
        judge_link = start_judge(job, report_fd) if job["judge"] else None
        close(job["key_fd"])  # the judge's key: never read here
        if job["seccomp"] and not job["inputs"]:  # I/O tests: each test's process installs it (io_tests.py)
            refuse(job["mode"] == "landlock")
    except BaseException as e:
        report("sandbox_error", describe(e))
        _exit(1)
    report("started")
    if job["inputs"]:
        io_tests(job, report, report_fd)
    else:
        keep = (runner_pid, judge_link[2] if judge_link else runner_pid) if job["mode"] in ISOLATED else None
        function_tests(job, report, judge_link, clear_refs, runner_pid, keep)
    report("done")
    _exit(0)  # at once: threads the program left running must not delay or change anything


def join_cgroups(job):
    """Move this process into the run's cgroup(s) (sandboxing/cgroup.py): "0" written to each
    hierarchy's cgroup.procs, opened by the parent (the kernel checks the opener's rights). First of
    all, so every process of the run, and every page they touch, is the cgroup's."""
    for fd in job["cgroup_fds"]:
        write(fd, b"0")
        close(fd)


def measure(clear_refs, keep):
    """Start of a test: reset the peak RSS to the current one -> (cpu, wall, rss KiB). `keep`: with
    namespaces, (runner, judge) pids -- every other process's CPU counts as the test's too."""
    write(clear_refs, b"5")
    return cpu_now(keep), perf_counter(), status_kib(b"VmRSS:")


def measured(start, keep):
    """(cpu s, wall s, peak MiB above the start) since measure(); then, with namespaces, whatever the
    test left running is killed (its CPU counted first)."""
    cpu, wall, rss = start
    timing = (cpu_now(keep) - cpu, perf_counter() - wall, max(0, status_kib(b"VmHWM:") - rss) / 1024)
    if keep:
        kill_others(keep)
    return timing


def cpu_now(keep):
    own, children = getrusage(RUSAGE_SELF), getrusage(RUSAGE_CHILDREN)
    cpu = own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime
    return cpu + others_cpu(keep) if keep else cpu


def line_recorder(lines):
    """sys.settrace's function for job["coverage"]: the line numbers of "<program>" that run go into
    `lines` (a set); other code (ours, the tests') is not traced. The main thread only."""
    add = lines.add

    def local(frame, event, arg):
        if event == "line":
            add(frame.f_lineno)
        return local

    def on_call(frame, event, arg):
        return local if frame.f_code.co_filename == "<program>" else None
    return on_call


def function_tests(job, report, judge_link, clear_refs, runner_pid, keep):
    """The program once, each value test, then the judge's calls (statement tests); with
    job["coverage"], traced line by line (line_recorder) and the lines reported at the end."""
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

    lines = set()
    trace = line_recorder(lines) if job.get("coverage") else None

    def covered():  # the lines so far, as data (before a load failure ends the run)
        if trace:
            settrace(None)
            report("coverage", list(lines))

    settrace(trace)
    verdict, detail = guarded(lambda: exec(compile(job["program"], "<program>", "exec",
                                                   dont_inherit=True), program), *budget)
    if getpid() != runner_pid:  # the program forked at its top level: the fork does no more
        _exit(0)
    if verdict == "passed" and tampered():
        verdict, detail = "error", TAMPERED
    if verdict != "passed":
        covered()
        report("load_failed", verdict, detail)
        _exit(0)
    report("loaded")

    for i, kind, code in tests:
        start = []

        def run_test():
            settrace(trace)  # the program's own tracer off (ours on, with job["coverage"])
            setprofile(None)
            for name, module, contents, keys in modules:  # undo patches of math.floor & co.
                sys.modules[name] = module
                namespace = vars(module)
                for key in namespace.keys() - keys:
                    del namespace[key]
                namespace.update(contents)
            ns = dict(program, __builtins__=dict(clean_builtins))  # builtins as they were
            exec(setup, ns)  # afresh per test: a helper replaced during one test is gone in the next
            start.append(measure(clear_refs, keep))
            return plain(eval(code, ns))

        verdict, result = ("error", code) if kind == "broken" else guarded(run_test, *budget)
        timing = measured(start[0], keep) if start else (None, None, None)
        if getpid() != runner_pid:  # a fork of the program's: it has nothing more to do
            _exit(0)
        if verdict == "passed" and timing[0] > budget[0]:  # its CPU and its children's
            verdict, result = "timeout", f"over {budget[0]} CPU s with the processes it started"
        if tampered():
            report("test", i, "error", TAMPERED, *timing)
            _exit(0)
        if verdict == "passed":
            report("value", i, result, *timing)
        else:
            report("test", i, verdict, result or "", *timing)
    if judge_link:
        serve(program, judge_link, budget, clear_refs, runner_pid, keep, trace)
    covered()


def serve(program, link, budget, clear_refs, runner_pid, keep, trace=None):
    """Answer the judge's calls of the program's functions: (seq, test, name, args, kwargs) ->
    (seq, kind, payload, args after the call, cpu_s, wall_s, mem_mb); each test has timeout_s of
    CPU across its calls. What we answer is the program's claim and nothing more: the judge
    compares. Ends when the judge closes its pipe."""
    calls, answers, _ = link
    names = [(name, "call" if callable(value) and not isinstance(value, type) else "data",
              None if callable(value) else value)
             for name, value in program.items() if not name.startswith("__")]
    names = [(name, kind, value) for name, kind, value in names if kind == "call" or is_plain(value)]
    used = {}
    try:
        send(answers, ("names", names))
        while True:
            seq, i, name, args, kwargs = receive(calls)
            fn, start = program.get(name), measure(clear_refs, keep)
            cpu_left = max(budget[0] - used.get(i, 0.0), 0.001)
            settrace(trace)
            verdict, result = guarded(lambda: call(fn, args, kwargs), cpu_left, budget[1])
            timing = measured(start, keep)
            if getpid() != runner_pid:
                _exit(0)
            used[i] = used.get(i, 0.0) + timing[0]
            if verdict == "passed" and used[i] > budget[0]:  # its CPU and its children's
                verdict, result = "timeout", f"over {budget[0]} CPU s with the processes it started"
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


def call(fn, args, kwargs):
    """fn(*args, **kwargs) for the judge: as_data() of its value, or ("raise", (builtin base class
    name, message)) for an exception, which the judge raises again (a test may expect it). A value
    that is not data is an error, not an exception the test could catch."""
    try:
        value = fn(*args, **kwargs)
    except Exception as e:
        base = next(k for k in type(e).__mro__ if k.__module__ == "builtins")
        return "raise", (base.__name__, str(e)[:300])
    return as_data(value)


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


