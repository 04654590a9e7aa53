"""Stress tests (docs/data.md#stress-tests): problems whose big test makes a naive solution at least 5x slower.

A problem with a `slow_solution` carries one or more stress tests: for a function problem an
`assert f(BIG_EXPR) == LITERAL` whose input is built by the expression, for an I/O problem an
io_test with a large input. Here, through the sandbox (run_many, 2 workers): the reference and the
slow solution both pass every test within the problem's time limit, and the slow solution's CPU
time is >= 5x the reference's. A ratio, so it holds on any machine; no wall-clock threshold.

CPU of a run's tests: sum(Result.test_cpu_s), the tests' own execution (no interpreter start).
Summed over all of a problem's tests: its small tests cost ~0 for both programs, so this can only
understate the ratio on the stress tests alone.
"""
import statistics

import coder
import data
import sandbox

DEFAULT_TIMEOUT_S = 4.0  # eval.py's --sandbox-timeout default
MIN_RATIO = 5.0
FLOOR_S = 0.001  # below this a reference's CPU is noise (an empty test's reading): divide by at least this


def _stress(name):
    return [p for p in data.load(name) if p.slow_solution]


def _check(problems):
    """Run reference, slow and empty programs; return (failures, ratios) for `problems`."""
    jobs = [p.sandbox_job(coder.program(p, code), DEFAULT_TIMEOUT_S)
            for p in problems for code in (p.solution, p.slow_solution, "pass\n")]
    results = sandbox.run_many(jobs, workers=2)
    failures, ratios = [], {}
    for i, p in enumerate(problems):
        ref, slow, empty = results[3 * i: 3 * i + 3]
        for who, r in (("reference", ref), ("slow_solution", slow)):
            if r.verdict != "passed" or r.passed != r.total:
                failures.append((p.task_id, who, r.verdict, r.detail))
        assert empty.verdict != "passed", p.task_id  # the stress tests are not passed by doing nothing
        ratios[p.task_id] = sum(slow.test_cpu_s) / max(sum(ref.test_cpu_s), FLOOR_S)
    return failures, ratios


def test_enough_stress_problems_each_with_a_distinct_slow_solution():
    """Catches: stress tests missing from a set, or a "slow" solution that is the reference itself."""
    train, val, io_val = _stress("train"), _stress("val"), _stress("io_val")
    assert len(train) >= 40 and len(val) >= 15 and len(io_val) >= 15, (len(train), len(val), len(io_val))
    for p in train + val + io_val:
        assert p.slow_solution.strip() != p.solution.strip(), p.task_id
        if not p.is_io:
            assert f"def {p.entry_point}(" in p.slow_solution, p.task_id


def test_function_stress_both_pass_and_slow_is_5x():
    """Catches: a slow solution that is wrong (fails a test), a reference that times out on its own
    stress test, and a stress input too small to separate the naive solution from the reference."""
    failures, ratios = _check(_stress("train") + _stress("val"))
    assert failures == []
    slow = {k: round(v, 1) for k, v in ratios.items() if v < MIN_RATIO}
    assert slow == {}, f"ratio below {MIN_RATIO}: {slow}; median {statistics.median(ratios.values()):.0f}"


def test_io_stress_both_pass_and_slow_is_5x():
    """The same for I/O problems: big stdin, both programs right, the naive one >= 5x the CPU."""
    failures, ratios = _check(_stress("io_val") + _stress("io_train"))
    assert failures == []
    slow = {k: round(v, 1) for k, v in ratios.items() if v < MIN_RATIO}
    assert slow == {}, f"ratio below {MIN_RATIO}: {slow}; median {statistics.median(ratios.values()):.0f}"
