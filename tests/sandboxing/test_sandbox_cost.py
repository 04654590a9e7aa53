"""A program's cost measured outside its run (sandboxing/cost.py): what ranks programs by speed or memory.

Real runs: the forgers of sandboxing/forgers.py (work at import time, patched clocks, a fake timing sent
through the report channel) against the honest program that does the same work, by name; an O(n) against
an O(n^2) program; 200 MiB held from import against nothing. The figures each asserts were measured with
bench/sandbox_cost.py (docs/sandbox.md#h11-claimed-per-test-timing): the same work costs the same within a
few % (median of 3 runs), while the in-process figures gave the import-time forger 0.2 ms against 46 ms.
"""
import contextlib
import os
import statistics
from types import SimpleNamespace

import pytest
import torch

import reward
import sandbox
from measure import efficiency
from sandboxing import cost, forgers

# Equal work: a forger's cost is at least this share of the honest one's. One program's cost on a 2-core Intel Xeon
# (2026-12-06) runs in streaks of two levels, ~0.055 and ~0.088 s, each lasting several runs, so the two programs
# are compared as pairs run back to back (the same streak), the median pair of 5; a figure read in the program's
# process would be below 0.01x.
TOLERANCE = 0.7


def test_outside_takes_the_larger_cpu_and_the_cgroup_peak():
    """wait4's 30 + 10 ms against a cgroup's 55 ms: 55 ms; with a cgroup its peak (30 MiB), not the largest
    process's (20 MiB); without one, the larger of ru_maxrss (20480 KiB = 20 MiB) and the watchdog's 12 MiB.
    Catches: user time alone, the cgroup's CPU ignored, a KiB / MiB slip."""
    usage = SimpleNamespace(ru_utime=0.03, ru_stime=0.01, ru_maxrss=20480)
    group = SimpleNamespace(cpu_seconds=lambda: 0.055, peak_bytes=lambda: 30 << 20)
    assert cost.outside(usage, group, 99.0) == (0.055, 30.0)
    assert cost.outside(usage, SimpleNamespace(cpu_seconds=lambda: None, peak_bytes=lambda: 0), 0.0) == (0.04, 0.0)
    assert cost.outside(usage, None, 12.0) == (0.04, 20.0)


def test_fixed_cost_is_the_median_of_the_empty_runs_measured_once_per_job():
    """Runs (10 ms, 5 MiB), (50, 1), (20, 2): median 20 ms and 2 MiB, one measurement for two calls; the net
    cost never goes below 0. Catches: the mean (26.7 ms, 2.67 MiB), the max (50, 5), the first run (10, 5),
    measuring again per program, a negative cost."""
    runs = iter([(0.010, 5.0), (0.050, 1.0), (0.020, 2.0)])
    calls = []
    key = cost.key("def f(): pass", ["assert f() == 1"], "a test of the fixed cost")
    first = cost.fixed(key, lambda: calls.append(1) or next(runs))
    assert first == (0.020, 2.0) and cost.fixed(key, lambda: 1 / 0) == first and len(calls) == cost.FIXED_RUNS
    assert cost.net((0.065, 230.0), first) == (0.045, 228.0) and cost.net((0.010, 1.0), first) == (0.0, 0.0)


def test_stub_keeps_the_names_that_plan_the_tests():
    """The empty program defines the program's functions and classes and nothing else, so each test is
    planned (value / statement) as the program's is. Catches: `pass` for every program (a value test
    planned as a statement: a judge process the program's run does not have)."""
    program = "import math\nHELD = [0] * 10\ndef f(x):\n    return math.sqrt(x)\nclass Solution:\n    def m(self): pass\n"
    assert cost.stub(program) == "def f(*a, **k): pass\nclass Solution: pass"
    assert cost.stub("print(1)") == "pass" and cost.stub("def (") == "pass"
    tests = ["assert f(4) == 2.0", "assert math.isclose(f(2), 1.414, rel_tol=1e-3)"]
    plan = [kind for kind, _, _ in sandbox.kinds.plan_tests(program, tests)]
    assert [kind for kind, _, _ in sandbox.kinds.plan_tests(cost.stub(program), tests)] == plan == ["value", "statement"]


def median_cost(program, tests, field="cost_s", runs=3):
    """The median over `runs` runs of ET (field cost_s) or MU (cost_mb) as efficiency.program_cost reads them."""
    results = [sandbox.run_program(program, tests, cost=True) for _ in range(runs)]
    assert all(r.verdict == "passed" for r in results), [(r.verdict, r.detail) for r in results]
    return statistics.median(efficiency.program_cost(r)[field == "cost_mb"] for r in results), results


def median_pair(pairs: list, cost_of) -> tuple:
    """The pair (honest, forger) of median cost ratio forger / honest among pairs run back to back: both of a
    pair ran in the same streak of the machine's speed (the module's note), which two separate bests need not."""
    return sorted(pairs, key=lambda pair: cost_of(pair[1]) / cost_of(pair[0]))[len(pairs) // 2]


def paired_costs(name, runs=5):
    """The honest program and forger `name` run back to back `runs` times, which first alternating (no place in
    the pair is favoured): ((honest cost_s, its result), (forger cost_s, its result)) of the median pair."""
    programs = [forgers.PROGRAMS["honest"], forgers.PROGRAMS[name]]
    pairs = []
    for i in range(runs):
        first, second = (sandbox.run_program(programs[j], forgers.TESTS, cost=True) for j in ((0, 1) if i % 2 == 0 else (1, 0)))
        pairs.append((first, second) if i % 2 == 0 else (second, first))
    for r in (r for pair in pairs for r in pair):
        assert r.verdict == "passed", (r.verdict, r.detail)
    honest, forged = median_pair(pairs, lambda r: efficiency.program_cost(r)[0])
    return (efficiency.program_cost(honest)[0], [honest]), (efficiency.program_cost(forged)[0], [forged])


@pytest.mark.parametrize("name", ["import time", "clock patch", "report"])
def test_no_forger_is_cheaper_than_the_honest_program(name):
    """Each forger does the honest program's work (5 loops of 200-240 thousand steps) and passes: its cost
    from outside is the honest one's within the spread (>= 0.7x; the median pair), so its NET against
    the honest program is no lower and its bonus (lambda = 1, the honest program as the reference) no higher
    beyond that spread, in both forms. Catches: any ranking figure read from the program's process -- there
    the import-time forger claims ~0.2 ms and the report forger 0 ms against the honest ~46 ms."""
    (honest_s, honest_runs), (forged_s, forged_runs) = paired_costs(name)
    assert honest_s > 0.02, honest_s  # the work is measured at all
    assert forged_s >= TOLERANCE * honest_s, (name, forged_s, honest_s)
    net = efficiency.ratio(forged_s, honest_s, efficiency.ET_FLOOR_S)
    assert net >= TOLERANCE, (name, net)
    bonus = reward.efficiency_bonus(torch.tensor([[forged_s, honest_s]]), torch.tensor([[True, True]]),
                                    torch.tensor([honest_s]))
    assert bonus[0, 0] <= bonus[0, 1] / TOLERANCE, (name, bonus)
    mb = honest_runs[0].cost_mb  # the time term alone: a fraction of a MiB apart is noise (memory: the 200 MiB test)
    assert efficiency.release_bonus(forged_s, mb) <= efficiency.release_bonus(TOLERANCE * honest_s, mb), name
    if name != "clock patch":  # its clocks reach the program only: the runner's per-test CPU stays right
        claimed = statistics.median(sum(r.test_cpu_s) for r in forged_runs)
        assert claimed < 0.1 * honest_s, (name, claimed)  # the diagnostic is fooled; the cost is not


def test_linear_and_quadratic_are_ordered_in_time():
    """The same answer by n = 1500 steps and by 1.1 million (a 750x margin in work): the quadratic one's cost
    is above the linear one's by more than 10 ms and 4 times over (measured ~0.4 ms against ~27 ms; on a busy
    machine once 5.5 against 53.6 ms). Catches: a cost that the fixed cost (~15 ms) swamps, or that counts no
    test's work."""
    linear, _ = median_cost(forgers.LINEAR, forgers.PAIRS_TESTS)
    quadratic, _ = median_cost(forgers.QUADRATIC, forgers.PAIRS_TESTS)
    assert quadratic > linear + 0.010 and quadratic > 4 * max(linear, efficiency.ET_FLOOR_S / 10), (linear, quadratic)


def test_memory_held_from_import_is_counted():
    """200 MiB allocated at the program's top level and held: its cost in memory is >= 180 MiB more than a
    program that holds nothing (measured 200.5 against 0.0 with a cgroup, 188.8 against 0 without: the
    largest process's peak less the empty program's). Catches: test_mem_mb's "above what the process held
    before the test", which gives both programs 0."""
    light, _ = median_cost(forgers.LIGHT, forgers.G_TESTS, "cost_mb", runs=1)
    held, held_runs = median_cost(forgers.HOLDS, forgers.G_TESTS, "cost_mb", runs=1)
    assert held - light >= 180, (light, held)
    assert max(held_runs[0].test_mem_mb) < 5  # the in-process figure misses it


def test_cost_only_when_asked_and_verdicts_unchanged():
    """cost=False (the default) measures nothing more; the verdicts and pass rates are the same with it.
    Catches: the empty program's runs made for every run (their cost is paid only where asked), a cost
    that changes a verdict."""
    program = forgers.PROGRAMS["honest"]
    wrong = program.replace("s += i * i", "s += i")
    plain = [sandbox.run_program(p, forgers.TESTS[:2]) for p in (program, wrong)]
    costed = [sandbox.run_program(p, forgers.TESTS[:2], cost=True) for p in (program, wrong)]
    assert [(r.verdict, r.tests) for r in plain] == [(r.verdict, r.tests) for r in costed] == [
        ("passed", ("passed", "passed")), ("failed", ("failed", "failed"))]
    assert plain[0].cost_s is None and plain[0].fixed is None and costed[0].fixed[0] > 0
    io = sandbox.run_program("import sys\nprint(sum(map(int, sys.stdin.read().split())))", cost=True,
                             io_tests=[("1 2\n", "3\n"), ("4 5\n", "9\n")])
    assert io.verdict == "passed" and io.cost_s is not None and io.fixed[0] > 0


def test_training_and_eval_ask_for_the_cost(monkeypatch):
    """train.py's runs ask for each program's cost only with --efficiency-weight > 0; eval's always (scoring).
    Catches: the bonus computed on results without a cost (every bonus 0), or every training run paying for
    the empty program's runs without the bonus."""
    import train
    from measure import scoring

    seen = []
    done = sandbox.Result("passed", 1, 1, 0.03, 0.03, 9.0, cost_s=0.02, cost_mb=1.5)
    monkeypatch.setattr(sandbox, "run_many", lambda jobs, workers=None: seen.append(jobs) or [done] * len(jobs))
    job = {"program": "def f(): pass", "tests": ["assert f() is None"]}
    for weight in ("0", "0.5"):
        train.run_programs(train.get_args(["--efficiency-weight", weight]), lambda name: contextlib.nullcontext(), [job])
    assert [[j.get("cost", False) for j in jobs] for jobs in seen] == [[False], [True]] and "cost" not in job
    problem = SimpleNamespace(sandbox_job=lambda program, timeout_s: {"program": program}, task_id="t")
    row = scoring.score([problem], [["p"]], [1], SimpleNamespace(sandbox_timeout=1.0, workers=1))["problems"][0]
    assert seen[-1] == [{"program": "p", "cost": True}] and (row["et_ms"], row["mu_mb"]) == (20.0, 1.5)


@pytest.fixture(scope="module")
def ordinary_user():
    from test_sandbox_rootless import UID, User
    u = User(UID + 1, "cost")
    yield u
    u.close()


@pytest.mark.skipif(os.geteuid() != 0, reason="drops to an unprivileged uid: needs root (as CI)")
def test_cost_as_an_ordinary_user(ordinary_user):
    """The ordinary user's way (tests/sandboxing/sandbox_as_user.py as an unprivileged uid: a user namespace, no cgroup,
    the watchdog): the 200 MiB program costs >= 150 MiB more than the light one (measured 188.8: the largest
    process's peak less the empty program's), the honest loop >= 20 ms and the import-time forger >= 0.7x
    of it. Catches: a measure that needs a cgroup or root."""
    cases = [[name, program, tests, {"cost": True}] for name, program, tests in (
        ("light", forgers.LIGHT, forgers.G_TESTS), ("held", forgers.HOLDS, forgers.G_TESTS),
        *[(f"{name}#{i}", forgers.PROGRAMS[name], forgers.TESTS) for i in range(5)
          for name in (("honest", "import time") if i % 2 == 0 else ("import time", "honest"))])]
    got = {c["name"]: c for c in ordinary_user.run(cases)}  # run in the list's order: each pair back to back
    pairs = [(got.pop(f"honest#{i}"), got.pop(f"import time#{i}")) for i in range(5)]
    got["honest"], got["import time"] = median_pair(pairs, lambda c: c["cost_s"])  # as paired_costs
    assert all(c["verdict"] == "passed" for c in got.values()), {k: c["detail"] for k, c in got.items()}
    assert got["held"]["cost_mb"] - got["light"]["cost_mb"] >= 150, (got["held"]["cost_mb"], got["light"]["cost_mb"])
    assert got["honest"]["cost_s"] >= 0.02 and got["import time"]["cost_s"] >= TOLERANCE * got["honest"]["cost_s"], \
        (got["honest"]["cost_s"], got["import time"]["cost_s"])
