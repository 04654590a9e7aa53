"""Stress tests (issue 14): problems whose big test makes a naive solution at least 5x slower.

A record with "slow_solution" carries one or more stress tests: for a function problem an
`assert f(BIG_EXPR) == LITERAL` whose input is built by the expression, for an I/O problem an
io_test with a large input. Here, through the sandbox (run_many, 2 workers): the reference and the
slow solution both pass every test within the problem's time limit, and the slow solution's CPU
time is >= 5x the reference's. A ratio, so it holds on any machine; no wall-clock threshold.

CPU of a run's tests: sum(Result.test_cpu_s) when the sandbox reports per-test CPU (CONTRACT.md),
else Result.cpu_s minus that of the same tests run against an empty program (the interpreter's
start and the harness, which both runs pay). Summed over all of a problem's tests: its small tests
cost ~0 for both programs, so this can only understate the ratio on the stress tests alone.
"""
import inspect
import json
import statistics
from pathlib import Path
from types import SimpleNamespace

import pytest

import coder
import sandbox

# I/O tests in the sandbox come with the `sandbox` branch (CONTRACT.md); until it is merged, skip.
NO_IO = pytest.mark.skipif("io_tests" not in inspect.signature(sandbox.run_program).parameters,
                           reason="sandbox.run_program has no io_tests yet")

DATA = Path(__file__).resolve().parent.parent / "data"
DEFAULT_TIMEOUT_S = 4.0  # eval.py's --sandbox-timeout default
MIN_RATIO = 5.0
# Below this, a reference's measured CPU is noise: the ratio divides by at least this much (our
# choice: 1 ms, an empty test's reading; 2 ms when we subtract two whole runs' cpu_s instead: an empty
# program's run reads 8.6 +- 0.5 ms on this machine).
FLOOR_TEST_S, FLOOR_RUN_S = 0.001, 0.002


def _records(name):
    path = DATA / f"{name}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _stress(name):
    return [r for r in _records(name) if r.get("slow_solution")]


def _as_problem(rec):
    """The attributes of data.Problem that coder.program reads, for a function record."""
    return SimpleNamespace(prompt=rec["prompt"], tests=tuple(rec["tests"]), is_io=False, entry_point=rec["entry_point"])


def _job(rec, code):
    """run_many kwargs for `code` on all of rec's tests (CONTRACT.md: io_tests for an I/O record)."""
    timeout = rec.get("time_limit_s") or DEFAULT_TIMEOUT_S
    if "io_tests" in rec:
        return dict(program=code, io_tests=[(t["input"], t["output"]) for t in rec["io_tests"]], timeout_s=timeout)
    return dict(program=coder.program(_as_problem(rec), code), tests=list(rec["tests"]),
                setup=rec.get("setup", ""), timeout_s=timeout)


def _test_cpu(result, empty):
    """CPU seconds of the tests' own execution, and the floor below which it is noise."""
    per_test = getattr(result, "test_cpu_s", None)
    if per_test and all(t is not None for t in per_test):
        return sum(per_test), FLOOR_TEST_S
    return result.cpu_s - empty.cpu_s, FLOOR_RUN_S


def _check(records, empty_program):
    """Run reference, slow and empty programs; return (failures, ratios) for `records`."""
    jobs = []
    for rec in records:
        jobs += [_job(rec, rec["solution"]), _job(rec, rec["slow_solution"]), _job(rec, empty_program)]
    results = sandbox.run_many(jobs, workers=2)
    failures, ratios = [], {}
    for i, rec in enumerate(records):
        ref, slow, empty = results[3 * i: 3 * i + 3]
        n = len(rec.get("io_tests") or rec["tests"])
        for who, r in (("reference", ref), ("slow_solution", slow)):
            if r.verdict != "passed" or r.passed != n:
                failures.append((rec["task_id"], who, r.verdict, r.detail))
        assert empty.verdict != "passed", rec["task_id"]  # the stress tests are not passed by doing nothing
        ref_s, floor = _test_cpu(ref, empty)
        slow_s, _ = _test_cpu(slow, empty)
        ratios[rec["task_id"]] = slow_s / max(ref_s, floor)
    return failures, ratios


def test_enough_stress_problems_each_with_a_distinct_slow_solution():
    """Catches: stress tests missing from a set, or a "slow" solution that is the reference itself."""
    train, val, io_val = _stress("train"), _stress("val"), _stress("io_val")
    assert len(train) >= 40 and len(val) >= 15, (len(train), len(val))
    if (DATA / "io_val.jsonl").exists():
        assert len(io_val) >= 15, len(io_val)
    for rec in train + val + io_val:
        assert rec["slow_solution"].strip() != rec["solution"].strip(), rec["task_id"]
        if "io_tests" not in rec:
            assert f"def {rec['entry_point']}(" in rec["slow_solution"], rec["task_id"]


def test_function_stress_both_pass_and_slow_is_5x():
    """Catches: a slow solution that is wrong (fails a test), a reference that times out on its own
    stress test, and a stress input too small to separate the naive solution from the reference."""
    records = _stress("train") + _stress("val")
    failures, ratios = _check(records, "pass\n")
    assert failures == []
    slow = {k: round(v, 1) for k, v in ratios.items() if v < MIN_RATIO}
    assert slow == {}, f"ratio below {MIN_RATIO}: {slow}; median {statistics.median(ratios.values()):.0f}"


@NO_IO
@pytest.mark.skipif(not (DATA / "io_val.jsonl").exists(), reason="no data/io_val.jsonl")
def test_io_stress_both_pass_and_slow_is_5x():
    """The same for I/O problems: big stdin, both programs right, the naive one >= 5x the CPU."""
    failures, ratios = _check(_stress("io_val") + _stress("io_train"), "pass\n")
    assert failures == []
    slow = {k: round(v, 1) for k, v in ratios.items() if v < MIN_RATIO}
    assert slow == {}, f"ratio below {MIN_RATIO}: {slow}; median {statistics.median(ratios.values()):.0f}"
