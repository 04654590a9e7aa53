"""measure/efficiency.py (EffiBench's ET / NET / MU / NMU) and reward.efficiency_bonus on hand-made sandbox results.
Results are stand-ins with sandbox.Result's cost fields (SimpleNamespace), so these tests do not run the
sandbox; tests/sandboxing/test_sandbox_cost.py runs it."""
from types import SimpleNamespace

import pytest
import torch

import reward
from measure import efficiency as eff


def res(verdict, cost_s, cost_mb, claimed=(0.0, 0.0)):
    """A Result's stand-in: the cost measured outside the run, and the per-test CPU its process claimed."""
    return SimpleNamespace(verdict=verdict, cost_s=cost_s, cost_mb=cost_mb, test_cpu_s=claimed, test_mem_mb=claimed)


def test_program_cost_is_the_cost_measured_outside():
    """ET = cost_s, MU = cost_mb; what the program's process claimed per test plays no part. Catches: the
    claimed per-test figures read (ET 0 here), timing a failed program, an unmeasured cost read as 0."""
    assert eff.program_cost(res("passed", 0.006, 2.0)) == (0.006, 2.0)
    assert eff.program_cost(res("failed", 0.006, 2.0)) is None
    assert eff.program_cost(res("passed", None, None)) is None  # run_program(cost=False)
    assert eff.program_cost(SimpleNamespace(verdict="passed")) is None  # a sandbox without the cost fields


def test_release_bonus_by_hand():
    """The authors' form: 0.05 s and 10 MiB -> 0.1 e^-0.15 + 0.1 e^-1 = 0.086071 + 0.036788 = 0.122859; 0 s and
    0 MiB -> 0.2; elementwise on tensors. Catches: a sign or a coefficient swapped (e^-0.3 e.g. gives 0.110868)."""
    assert eff.release_bonus(0.05, 10.0) == pytest.approx(0.122859, abs=1e-6)
    assert eff.release_bonus(0.0, 0.0) == pytest.approx(0.2)
    got = eff.release_bonus(torch.tensor([0.05, 1.0]), torch.tensor([10.0, 0.0]))
    assert torch.allclose(got, torch.tensor([0.122859, 0.1 * 0.049787 + 0.1], dtype=torch.float64), atol=1e-6)


def test_net_nmu_by_hand():
    """Reference: cost 4 + 4 ms, peak 2.0 MiB -> ET_ref 8 ms, MU_ref 2 MiB.
    p1: 8 + 8 ms, 4 MiB -> NET 16/8 = 2, NMU 4/2 = 2;  p2: 20 + 20 ms, 0.5 MiB -> NET 40/8 = 5,
    NMU max(0.5, 1)/2 = 0.5;  p3 fails. Problem: ET (16+40)/2 = 28 ms, MU 2.25, NET 3.5, NMU 1.25,
    2 timed, 1 with NET > 2 (p1's NET = 2 is not > 2).
    Catches: ratio of means instead of mean of ratios (NET would be 14/4 = 3.5 here too, see the next
    case), the failed program counted, NET >= 2 instead of > 2, no memory floor (NMU 0.25 for p2)."""
    ref = eff.program_cost(res("passed", 0.004 + 0.004, max(2.0, 1.5)))
    progs = [res("passed", 0.008 + 0.008, max(4.0, 1.0)), res("passed", 0.020 + 0.020, 0.5),
             res("failed", 0.001, 0.1)]
    row = eff.problem_row([eff.program_cost(r) for r in progs], ref)
    assert row == pytest.approx({"et_ms": 28.0, "mu_mb": 2.25, "net": 3.5, "nmu": 1.25, "timed": 2, "net_gt2": 1,
                                 "ref_et_ms": 8.0, "ref_mu_mb": 2.0})


def test_net_is_the_mean_of_ratios_and_floors_noise():
    """Two programs of 10 ms and 150 ms against a 50 ms reference: NET = (0.2 + 3) / 2 = 1.6, not the ratio of
    means 80/50. Below the 5 ms floor both sides are equal: 0.5 ms against a 0.1 ms reference is NET 1,
    not 5. No reference: ET / MU kept, NET / NMU None. Catches: ratio of means, a missing time floor."""
    assert eff.ET_FLOOR_S == 5e-3
    row = eff.problem_row([(0.010, 1.0), (0.150, 1.0)], (0.050, 1.0))
    assert row["net"] == pytest.approx(1.6) and row["net_gt2"] == 1
    assert eff.problem_row([(0.0005, 0.2)], (0.0001, 0.1))["net"] == pytest.approx(1.0)
    none = eff.problem_row([(0.002, 3.0)], None)
    assert (none["et_ms"], none["mu_mb"], none["net"], none["nmu"]) == (pytest.approx(2.0), 3.0, None, None)
    assert eff.problem_row([None, None], (0.01, 1.0))["et_ms"] is None


def _system(rows):
    return {"problems": [{"task_id": t, **r} for t, r in rows.items()]}


def test_summary_over_problems_every_system_solves():
    """A solves a (NET 3.5, 2 programs, 1 slow) and b (NET 1, 1 program); B solves a (NET 1) but not b;
    c has no passing reference, so it is left out though both solve it. Common = {a}: A NET 3.5,
    slow share 1/2; B NET 1, share 0. Catches: means over each system's own solved set (A would be
    2.25), counting a problem without a reference, share over problems instead of programs."""
    ref = (0.040, 2.0)
    a_A = eff.problem_row([(0.080, 4.0), (0.200, 0.5)], ref)
    a_B = eff.problem_row([(0.040, 2.0)], ref)
    b_A = eff.problem_row([(0.040, 2.0)], ref)
    b_B = eff.problem_row([None], ref)
    c = eff.problem_row([(0.040, 2.0)], None)
    rows = {"A": _system({"a": a_A, "b": b_A, "c": c}), "B": _system({"a": a_B, "b": b_B, "c": c})}
    out, n = eff.summary(rows)
    assert n == 1
    assert out["A"] == pytest.approx({"et_ms": 140.0, "net": 3.5, "mu_mb": 2.25, "nmu": 1.25, "slow_share": 0.5})
    assert out["B"] == pytest.approx({"et_ms": 40.0, "net": 1.0, "mu_mb": 2.0, "nmu": 1.0, "slow_share": 0.0})
    rows["C"] = _system({"a": b_B, "b": b_B, "c": c})  # solves nothing: no common problem
    out, n = eff.summary(rows)
    assert n == 0 and out["A"]["net"] is None


def test_summary_without_references_keeps_et_and_mu():
    """A set with no reference solutions (e.g. a file without 'solution'): common = solved by all,
    ET / MU reported, NET / NMU / share None. Catches: an empty table because every ref is missing."""
    rows = {"A": _system({"a": eff.problem_row([(0.003, 1.5)], None)}),
            "B": _system({"a": eff.problem_row([(0.005, 2.5)], None)})}
    out, n = eff.summary(rows)
    assert n == 1 and out["A"]["et_ms"] == pytest.approx(3.0) and out["B"]["mu_mb"] == 2.5
    assert out["A"]["net"] is None and out["A"]["slow_share"] is None


def test_efficiency_bonus_by_hand():
    """lambda = 0.5, problems of 3 programs ([B, G=1, M=3]), a floor of 1 ms.
    Problem 0, reference 10 ms: 10 ms -> NET 1 -> 0.5; 20 ms -> NET 2 -> 0.25; 5 ms (faster) -> capped 0.5;
    Problem 1, no reference (NaN): fastest passing is 0.1 ms -> floored to 1 ms; 3 ms -> 0.5/3, 6 ms -> 0.5/6,
    and the 0.1 ms one -> 0.5. A failing program gets 0 even when fastest (problem 2: the 1 ms one fails,
    so the group minimum is 4 ms). Catches: normalising by the group max (train.py's old rule), letting a
    failing program set the minimum, no floor (0.1 ms would make the others 30x and 60x slow), no cap."""
    t = torch.tensor([[[0.010, 0.020, 0.005]], [[0.003, 0.006, 0.0001]], [[0.001, 0.004, 0.008]]])
    ok = torch.tensor([[[True, True, True]], [[True, True, True]], [[False, True, True]]])
    ref = torch.tensor([0.010, float("nan"), float("nan")])
    got = reward.efficiency_bonus(t, ok, ref, weight=0.5, floor_s=1e-3)
    want = torch.tensor([[[0.5, 0.25, 0.5]], [[0.5 / 3, 0.5 / 6, 0.5]], [[0.0, 0.5, 0.25]]])
    assert got.shape == (3, 1, 3) and torch.allclose(got, want, atol=1e-6)
    assert torch.equal(reward.efficiency_bonus(t, torch.zeros_like(ok)), torch.zeros_like(t))  # nothing passes
    assert torch.allclose(reward.efficiency_bonus(t, ok, None, weight=0.5, floor_s=1e-3)[0],
                          torch.tensor([[0.25, 0.125, 0.5]]))


def test_bonus_and_metric_share_one_floor():
    """The reward must not chase differences the metric calls noise. Catches: the two floors drifting apart."""
    import inspect

    assert inspect.signature(reward.efficiency_bonus).parameters["floor_s"].default == eff.ET_FLOOR_S
