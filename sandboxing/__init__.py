"""The sandbox's internals, behind sandbox.py (run a program, get a Result whose pass_rate is the
reward). A reader of the training loop can skip this folder; one who wants the isolation and the
judging reads it in this order.

Our side of a run (the training process):
    launch.py           one run from our side: the job, the spawn, the reports read until exit, the memory meter
    process.py          isolation modes, the uid lease, the child's code, reading its reports, killing the rest
    memory.py           the run's memory budget: the mechanism found by trying it, the watchdog, the host guard
    cgroup.py           a cgroup per run (v2 or v1): its limits, OOM-kill count, CPU and peak, its removal
    cost.py             a program's cost (CPU s, peak MiB) measured outside its run, less an empty program's
    kinds.py            what kind each test is (value, statement, I/O): where its verdict can be reached by no program
    judge.py            the run's reports, decoded under bounds, and each test's verdict, where the program cannot reach it
    checkers.py         each benchmark's own rule for an I/O test's output (checkers.use / checkers.strict)
    special_checker.py  a problem's own checker program, run in the sandbox as untrusted code
    check.py            what is in force here, seen from inside a run (python sandbox.py --check)
    bombs.py, forgers.py  hostile programs: memory bombs (--check --deep), programs that claim speed they lack

The child's side (compiled here once, shipped to every run on its stdin: process.CHILD_MODULES):
    runner.py           the child's protocol: its set-up order, the program once, its function tests, the reports
    child.py            the child's rlimits, stdio, /proc readings, timers and the plain data that crosses pipes
    confine.py          the child's isolation: its own read-only root filesystem, capabilities and keyrings dropped
    io_tests.py         I/O tests, each in a fork of the warm runner
    judge_process.py    the judge process: statement tests, run where no program code ever ran
    seccomp.py          without a cgroup: the filter refusing memfds, SysV shm, nested namespaces, mounts (and,
                        in the Landlock tier, sockets, ptrace, keyrings)
    landlock.py         where no namespace can be made: the keeper holding every orphan, the Landlock rules

Nothing is imported here: the child builds these modules from code sent on its stdin, without this file.
"""
