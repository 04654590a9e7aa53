"""One run from our side, from the job to the reaped child (sandbox.run_program calls `prepare`, then
`run`): the job the child reads, its tokens and the judge's sealed half; then the uid, the work dir,
the run's memory meter (a cgroup, or the watchdog: sandboxing/memory.py), the spawn, the reports read
until the child exits, and nothing of the run left afterwards.
"""
import ast
import contextlib
import dataclasses
import functools
import hashlib
import marshal
import math
import os
import secrets
import subprocess
import sys
import time

from sandboxing import cost, kinds, memory, process
from sandboxing.confine import ISOLATED


def prepare(program, plans, setup, timeout_s, memory_mb, mode, limits):
    """(job, tokens, key, cpu_limit_s): what the child is sent, the report tokens {"program", "judge"?},
    the judge's key. limits: sandbox.py's {wall_factor, startup_s, output_mb, max_procs}."""
    statements = [(i, src) for i, (kind, src, _) in enumerate(plans) if kind == "statement"]
    values = tuple(src for kind, src, _ in plans if kind == "value")
    tokens = {"program": secrets.token_hex(16)}
    key = secrets.token_bytes(32)
    wall_s = limits["wall_factor"] * timeout_s
    sealed = None
    if statements:
        tokens["judge"] = secrets.token_hex(16)
        sealed = seal(marshal.dumps(dict(token=tokens["judge"], setup=setup, tests=statements, timeout_s=timeout_s,
                                         wall_s=wall_s,
                                         modules=modules(setup, tuple(src for _, src in statements), keep_sys=True))), key)
    cpu_limit = math.ceil(timeout_s * (len(plans) + 1) + limits["startup_s"])
    job = dict(program=program, setup=setup if kinds.uses_setup(plans, setup) else "",  # only for its inputs (kinds.plan_tests)
               tests=[("value", src) if kind in ("value", "check") else (kind, None) for kind, src, _ in plans
                      if kind != "io"],
               modules=modules(setup, values) if values else [],
               inputs=[given.encode() for kind, given, _ in plans if kind == "io"],
               judge=sealed, key_fd=None, cgroup_fds=[], seccomp=False,
               token=tokens["program"], timeout_s=timeout_s, wall_s=wall_s,
               cpu_limit_s=cpu_limit, memory_mb=memory_mb, output_bytes=limits["output_mb"] << 20,
               max_procs=memory.max_procs(limits["max_procs"]), site_dirs=process.SITE_DIRS, mode=mode, uid=None,
               show=[], hide=[], hide_files=[], readable=[])
    return job, tokens, key, cpu_limit


@dataclasses.dataclass
class Ran:
    """How the child ended: its wait status and rusage, `cut` (None: it exited; "deadline", "limit" or
    "memory": we stopped it), the memory verdict's detail, the run's memory peak (MiB), or `error`
    (it could not be started)."""
    status: int = 0
    cpu_s: float = 0.0
    cut: str | None = None
    memory: str | None = None
    peak_mb: float = 0.0
    error: str = ""
    wall_s: float = 0.0  # from the spawn to the child reaped (not the cgroup's removal after it)
    outside_s: float = 0.0  # the run's CPU s, all its processes, measured out of its reach (cost.outside)
    outside_mb: float = 0.0  # the run's memory peak, MiB, the same way


def run(job, key, feed, limit, deadline_s, env):
    """Spawn the child for `job` (sandbox.run_program's), send it its code and job, feed its report
    lines to `feed` until it exits (at most `limit` bytes, until `deadline_s` from now), kill whatever
    is left of it; -> Ran."""
    mode, start = job["mode"], time.monotonic()
    with process.own_uid(mode) as uid, process.workdir(mode, uid) as workdir:
        job["uid"] = uid
        if mode in ISOLATED:
            job.update(show=process.shown(), hide=process.hidden_answers(), hide_files=process.hidden_files())
        elif mode == "landlock":
            job["readable"] = process.landlock_readable()
        try:
            meter = memory.Meter(mode, memory.budget_mb(), job["max_procs"],
                                 (workdir, uid) if mode == "landlock" else None)
        except OSError as e:
            return Ran(error=f"memory cgroup: {e}"[:300])
        try:
            return _spawned(job, key, feed, limit, start, start + deadline_s, env, workdir, meter)
        finally:
            meter.close()
            if mode == "landlock":
                memory.remove_shm(uid, meter.since)


def _spawned(job, key, feed, limit, start, deadline, env, workdir, meter):
    mode, uid = job["mode"], job["uid"]
    job["cgroup_fds"] = list(meter.fds())
    job["seccomp"] = meter.group is None or mode == "landlock"  # the Landlock tier: always (seccomp.py, isolate)
    command = {"root": process.UNSHARE, "user": process.UNSHARE_USER}.get(mode, []) + [
        sys.executable, "-I", "-S", "-c", process.BOOT]
    key_read, key_write = os.pipe()  # the judge's key: the one thing the program's process never reads
    job["key_fd"] = key_read  # pass_fds keeps the numbers
    try:
        proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                env={**env, "TMPDIR": workdir} if mode == "landlock" else env, cwd=workdir,
                                start_new_session=True,
                                pass_fds=(key_read, *job["cgroup_fds"]))
    except OSError as e:
        os.close(key_write)
        return Ran(error=f"spawn: {e}")
    finally:
        os.close(key_read)
        for fd in job["cgroup_fds"]:
            os.close(fd)
        for group in (meter.group, meter.gauge):
            group and group.fds.clear()
    meter.start(proc.pid)
    cut = "deadline"
    try:
        with contextlib.suppress(BrokenPipeError):
            os.write(key_write, key)  # 32 bytes: fits the pipe, never blocks
        os.close(key_write)
        key_write = None
        with contextlib.suppress(BrokenPipeError):
            proc.stdin.write(marshal.dumps((process.CHILD_CODE, job)))
            proc.stdin.close()
        cut = process.read_until_exit(proc, deadline, feed, limit, watch=meter.over, tick=meter.tick)
        if cut is None and meter.oom_killed():  # the OOM killer struck, and the run ended before we looked
            cut = "memory"
    finally:
        if key_write is not None:
            os.close(key_write)
        process.kill_run(proc, mode, uid, exited=cut is None)  # before reaping: its pid stays ours till then
        for group in (meter.group, meter.gauge):
            group and group.kill()
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        proc.stdout.close()
    wall_s = time.monotonic() - start
    outside_s, outside_mb = cost.outside(usage, meter.group or meter.gauge, meter.peak / 2**20)
    return Ran(status, usage.ru_utime + usage.ru_stime, cut, meter.cut if cut == "memory" else None, meter.peak_mb(),
               wall_s=wall_s, outside_s=outside_s, outside_mb=outside_mb)


def seal(data: bytes, key: bytes) -> bytes:
    """data XOR a SHAKE-256 keystream of `key` (a one-time pad: one key per run, never reused):
    the program's process carries the judge's job but cannot read it without the key."""
    pad = hashlib.shake_256(key).digest(len(data))
    return (int.from_bytes(data, "little") ^ int.from_bytes(pad, "little")).to_bytes(len(data), "little")


@functools.lru_cache(maxsize=4096)
def modules(setup, expressions, keep_sys=False):
    """Modules that the setup and tests import or name (math in `math.floor(f(1))`). The program's
    process imports them before the program runs and restores them before every value test; the
    judge process puts them in each statement test's namespace (`sys` too: MBPP 596's tests use
    sys.getsizeof with the `sys` the program imported)."""
    names = set()
    for source in (setup, *expressions):
        with contextlib.suppress(Exception):
            for node in ast.walk(ast.parse(source)):
                if isinstance(node, ast.Import):
                    names.update(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names.add(node.module)
                elif isinstance(node, ast.Name) and node.id in sys.stdlib_module_names:
                    names.add(node.id)
    return sorted(names - ({"builtins"} if keep_sys else {"sys", "builtins"}))
