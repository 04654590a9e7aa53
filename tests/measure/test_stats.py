"""measure/stats.py: the bootstrap interval against the exact binomial distributions, McNemar's exact test
by hand, the paired bootstrap, pass@k per problem. References are computed here independently
(binomial sums + bisection: no scipy)."""
from math import comb

import pytest

from measure import stats


def binom_cdf(x: int, n: int, p: float) -> float:
    return sum(comb(n, i) * p ** i * (1 - p) ** (n - i) for i in range(x + 1))


def bisect(pred, lo=0.0, hi=1.0):
    """The boundary of a monotone predicate on [0, 1]: pred true below it, false above."""
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if pred(mid) else (lo, mid)
    return (lo + hi) / 2


def clopper_pearson(x: int, n: int, alpha: float = 0.05) -> tuple[float, float]:
    """Exact interval: P[X >= x | p_lo] = alpha/2 and P[X <= x | p_hi] = alpha/2, X ~ Binomial(n, p)."""
    lo = 0.0 if x == 0 else bisect(lambda p: 1 - binom_cdf(x - 1, n, p) < alpha / 2)
    hi = 1.0 if x == n else bisect(lambda p: binom_cdf(x, n, p) > alpha / 2)
    return lo, hi


def test_clopper_pearson_reference_itself():
    """The reference must be right before it judges: 10 of 20 -> [0.2720, 0.7280] (standard tables)."""
    assert clopper_pearson(10, 20) == pytest.approx((0.27196, 0.72804), abs=5e-5)


def test_bootstrap_of_10_of_20_is_the_exact_binomial_quantile_interval():
    """Resampling 20 problems of which 10 solved gives means ~ Binomial(20, 1/2) / 20 exactly; its
    2.5 % / 97.5 % quantiles are 6/20 and 14/20 (P[X <= 5] = 0.021 < 0.025 <= P[X <= 6] = 0.058).
    Catches: resampling without replacement (interval collapses to [0.5, 0.5]), resampling samples
    instead of problems, swapped or off-by-one percentile indices (0.25 / 0.75)."""
    assert binom_cdf(5, 20, 0.5) < 0.025 <= binom_cdf(6, 20, 0.5)
    assert binom_cdf(13, 20, 0.5) < 0.975 <= binom_cdf(14, 20, 0.5)
    lo, hi = stats.bootstrap_ci([1.0] * 10 + [0.0] * 10)
    assert (lo, hi) == pytest.approx((0.30, 0.70), abs=0.01)


def test_bootstrap_against_clopper_pearson():
    """At HumanEval's size (82 of 164) the bootstrap is within 1 point of the exact Clopper-Pearson
    interval at both ends; at 20 problems it is 2.8 points narrower at each end (the documented limit:
    Clopper-Pearson is conservative and the percentile bootstrap undercovers at small N).
    Catches: an interval of the wrong width (e.g. a 68 % interval, or sd instead of quantiles)."""
    for x, n in [(82, 164), (27, 53)]:
        lo, hi = stats.bootstrap_ci([1.0] * x + [0.0] * (n - x))
        cp_lo, cp_hi = clopper_pearson(x, n)
        assert abs(lo - cp_lo) <= 0.01 and abs(hi - cp_hi) <= 0.01, (x, n, lo, hi, cp_lo, cp_hi)
    lo, hi = stats.bootstrap_ci([1.0] * 10 + [0.0] * 10)
    cp_lo, cp_hi = clopper_pearson(10, 20)
    assert lo - cp_lo == pytest.approx(0.028, abs=1e-3) and cp_hi - hi == pytest.approx(0.028, abs=1e-3)


def test_bootstrap_is_reproducible_and_degenerate_cases():
    """Fixed seed: the same interval on every render; all-solved has no spread; no problems -> nan.
    Catches: an unseeded generator (the table would change each time it is re-rendered)."""
    v = [1.0] * 7 + [0.0] * 13
    assert stats.bootstrap_ci(v) == stats.bootstrap_ci(v)
    assert stats.bootstrap_ci([1.0] * 5) == (1.0, 1.0) and stats.bootstrap_ci([0.0] * 5) == (0.0, 0.0)
    lo, hi = stats.bootstrap_ci([])
    assert lo != lo and hi != hi


@pytest.mark.parametrize("b,c,p", [(1, 6, 16 / 128),          # 2 (C(7,0) + C(7,1)) / 2^7
                                   (2, 7, 2 * (1 + 9 + 36) / 512),  # 2 (C(9,0)+C(9,1)+C(9,2)) / 2^9
                                   (0, 5, 2 / 32), (0, 6, 2 / 64),  # 5 wins of 5: not significant; 6: yes
                                   (4, 4, 1.0), (0, 0, 1.0), (3, 0, 0.25)])
def test_mcnemar_exact_by_hand(b, c, p):
    """Catches: one-sided p (half), a normal approximation (b=1, c=6 gives 0.131 with continuity
    correction, 0.059 without), counting concordant pairs, p > 1 when b == c."""
    assert stats.mcnemar_exact(b, c) == pytest.approx(p, abs=1e-12)


def test_paired_test_on_a_hand_made_2x2_table():
    """10 problems: both solve 2, only A solves 1, only B solves 6, neither 1 -> b = 1, c = 6, p = 0.125,
    diff = (8 - 3) / 10 = +0.5. Catches: b and c swapped in the sign of diff, unpaired counting."""
    a = [1, 1, 1, 0, 0, 0, 0, 0, 0, 0]
    b = [1, 1, 0, 1, 1, 1, 1, 1, 1, 0]
    r = stats.paired_test([float(x) for x in a], [float(x) for x in b])
    assert (r["method"], r["b"], r["c"]) == ("mcnemar", 1, 6)
    assert r["p"] == pytest.approx(0.125) and r["diff"] == pytest.approx(0.5) and not r["significant"]
    with pytest.raises(ValueError, match="same problems"):
        stats.paired_test([1.0], [1.0, 0.0])


def test_paired_bootstrap_on_fractional_scores():
    """pass@1 from 4 samples (scores in quarters): B better by exactly 0.25 on every one of 20 problems
    -> every resampled mean difference is 0.25, p = 0 (significant), interval [0.25, 0.25]; identical
    systems -> p = 1. Catches: unpaired resampling (A and B drawn with different problems would give
    a spread), a p-value that ignores the sign."""
    a = [0.25 * (i % 4) for i in range(20)]
    r = stats.paired_test(a, [x + 0.25 for x in a])
    assert r["method"] == "bootstrap" and r["p"] == 0.0 and r["significant"]
    assert (r["lo"], r["hi"]) == pytest.approx((0.25, 0.25)) and r["diff"] == pytest.approx(0.25)
    same = stats.paired_test(a, list(a))
    assert same["p"] == 1.0 and not same["significant"]


def test_problem_scores_use_each_rows_own_n():
    """Rows with 4 verdicts and c = 0, 1, 4 passing: pass@1 = 0, 0.25, 1; pass@2 = 0, 0.5, 1.
    Catches: pass@k averaged over samples of all problems, n taken from the first row only."""
    rows = [{"passed": c, "verdicts": ["x"] * 4} for c in (0, 1, 4)]
    assert stats.problem_scores(rows, 1) == pytest.approx([0.0, 0.25, 1.0])
    assert stats.problem_scores(rows, 2) == pytest.approx([0.0, 0.5, 1.0])
