"""I/O tests in the child (runner.py step 4): each test in a fork of the warm runner.

The fork takes the test's input as stdin (a memfd), a capped memfd as stdout and one as stderr,
closes the report pipe, sets the limits of one test and runs the program as __main__; the runner
waits for it (wall-clock limit), kills whatever it started, and sends its stdout, exit status,
stderr's last line and timing to the parent, which judges the output by the problem's checker (checkers.py).
The expected output is never here.

Why a fork per test (measured on this machine, 2 cores, `python bench/sandbox_bench.py`): one
program with 50 tests costs ~145 ms in all here (~2.4 ms a test: fork, memfds, wait, report),
where a fresh `python -c` per test costs 7-14 ms each, and a fresh sandboxed run per test would
pay the sandbox's set-up (namespaces, mounts, uid: ~25 ms) 50 times. On 2 workers: 520 tests/s
against 142 for `subprocess.run(input=...)` per test (3.65x). Honest: each test gets the
interpreter as it was before any program code ran (nothing of test 1 is left in test 2), the
same limits, its own CPU and memory accounting (wait4), less what it held when it was forked.
"""
import builtins
import os
import resource
import select
import sys
from _signal import ITIMER_PROF, SIG_DFL, SIGPROF, setitimer
from _signal import signal as set_handler
from builtins import BaseException, SystemExit, compile, type
from os import _exit, close, read, write
from resource import RUSAGE_SELF, getrusage
from time import perf_counter

from sandboxing.child import EFBIG_HINT, describe, kill_tree, others_cpu, own_address_space, peak_kib, status_kib
from sandboxing.seccomp import refuse

# Names of the signals that end a program (not the `signal` module: its `enum` import costs ~5 ms a run)
SIGNALS = {4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL", 11: "SIGSEGV", 13: "SIGPIPE",
           15: "SIGTERM", 5: "SIGTRAP", 31: "SIGSYS"}


def io_tests(job, report, report_fd):
    """Compile once; each test in a fork of the warm runner; one ("io", ...) report per test."""
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
    timed_out = not select.select([pidfd], [], [], job["wall_s"])[0]
    close(pidfd)
    if timed_out:
        os.kill(pid, 9)
    _, status, usage = os.wait4(pid, 0)
    wall = perf_counter() - wall
    left = others_cpu((os.getpid(),)) if job["mode"] in ("root", "user") else 0.0  # what it left running
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
    cpu = usage.ru_utime + usage.ru_stime + left
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
            verdict = f"killed by {SIGNALS.get(sig, f'signal {sig}')}"
        return verdict, b"", tail, timing, usage.ru_maxrss
    if cpu - cpu0 > timeout:  # its own timer would have fired: the processes it started did the work
        return "timeout", b"", f"over {timeout} CPU s with the processes it started", timing, usage.ru_maxrss
    if size >= cap or EFBIG_HINT in tail:
        return "output_limit", b"", f"output over {cap >> 20} MiB", timing, usage.ru_maxrss
    code_ = os.WEXITSTATUS(status)
    if code_ != 0 and tail.startswith("MemoryError"):
        return "memory", b"", tail, timing, usage.ru_maxrss
    return f"exited {code_}", out, tail, timing, usage.ru_maxrss


def kill_rest(job, pid):
    """After an I/O test: whatever its process started dies too, so nothing prints into the
    next test. With namespaces we are pid 1 of the run's pid namespace: kill(-1) reaches every
    process in it but us -- setsid() or not -- and we reap them (`uid` mode: every process of the
    run's uid). `none` mode: its process group only; the Landlock tier: every process below us (what
    setsid() took out of the group is the keeper's now, killed at the verdict: landlock.py)."""
    try:
        if job["mode"] == "landlock":
            kill_tree(os.getpid())
            os.killpg(pid, 9)
        elif job["mode"] != "none" and not job["judge"]:
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
        if job["seccomp"]:  # no cgroup: the memory channels an address-space limit cannot see, closed
            refuse(job["mode"] == "landlock")  # (and the Landlock tier's refusals: seccomp.py)
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
