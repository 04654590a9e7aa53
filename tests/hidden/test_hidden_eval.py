"""Hidden tests of stats.pass_at_k (course/exercises.toml `hidden`): other (n, c, k) than the public
tests, values by hand (1 - C(n-c, k) / C(n, k)) and by math.comb."""
from math import comb

import pytest

from measure.stats import pass_at_k


@pytest.mark.parametrize("n,c,k,want", [
    (4, 1, 2, 0.5),  # 1 - C(3, 2)/C(4, 2) = 1 - 3/6
    (10, 3, 4, 5 / 6),  # 1 - C(7, 4)/C(10, 4) = 1 - 35/210
    (6, 0, 3, 0.0),  # nothing passes
    (6, 4, 3, 1.0),  # n - c = 2 < k: every draw of 3 holds a pass
    (9, 9, 1, 1.0),
    (7, 2, 1, 2 / 7),  # pass@1 = c / n
])
def test_hidden_pass_at_k_hand_values(n, c, k, want):
    assert pass_at_k(n, c, k) == pytest.approx(want, abs=1e-12)


def test_hidden_pass_at_k_matches_comb():
    cases = [(n, c, k) for n in (2, 3, 8, 13, 50) for c in range(n + 1) for k in (1, 2, 3, 7) if k <= n]
    assert [pass_at_k(*x) for x in cases] == pytest.approx([1 - comb(n - c, k) / comb(n, k) for n, c, k in cases],
                                                             abs=1e-9)


def test_hidden_pass_at_k_needs_k_samples():
    with pytest.raises(ValueError):
        pass_at_k(3, 0, 4)
    with pytest.raises(ValueError):
        pass_at_k(1, 1, 2)
