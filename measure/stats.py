"""Statistics for the comparison table: pass@k, its interval over problems, paired tests.

Every number in results.md is a mean over problems of a per-problem score s_i (pass@k of
problem i from its n samples). What varies if we drew another set of problems is that mean, so
the interval resamples PROBLEMS (Efron's percentile bootstrap; Efron & Tibshirani 1993, ch. 13):

    draw I*_1..I*_N uniformly with replacement from {1..N},  m*_r = (1/N) sum_j s_{I*_j},  r = 1..R
    95 % interval = [m*_(floor(0.025 R)), m*_(ceil(0.975 R) - 1)]  of the sorted m*  (R = RESAMPLES)

Two systems evaluated on the SAME problems are compared paired (per-problem differences), which
is far more sensitive than two overlapping intervals:
  - binary scores (greedy pass@1: each problem solved or not): McNemar's exact test
    (McNemar 1947; exact form = a two-sided binomial test on the discordant pairs):
        b = problems only A solves, c = problems only B solves,
        p = min(1, 2 * sum_{i=0}^{min(b,c)} C(b+c, i) / 2^(b+c))
  - fractional scores (n > 1 samples): the paired bootstrap of the mean difference d_i = s^B_i - s^A_i,
    resampling problems as above; p = min(1, 2 * min(P*(mean d <= 0), P*(mean d >= 0))).
A difference is marked significant when p < ALPHA. Standard library only (no scipy).

Known limit (tests/measure/test_stats.py checks it): with few problems the percentile bootstrap is
narrower than the exact Clopper-Pearson interval (10 of 20: [0.30, 0.70] vs [0.272, 0.728]); at
val's 53 and HumanEval's 164 problems (half solved) the two agree within 1 point at both ends.
"""
import random
from math import ceil, comb, floor, prod

RESAMPLES = 10_000  # R: from seed to seed an endpoint moves by at most about one problem (1/N)
SEED = 0  # fixed: re-rendering a results.json gives the same intervals
ALPHA = 0.05  # significance level of the paired tests (two-sided)


def pass_at_k(n: int, c: int, k: int) -> float:
    """Unbiased pass@k from n samples of which c pass (Chen et al. 2021, "Evaluating Large
    Language Models Trained on Code", eq. 1): 1 - C(n-c, k) / C(n, k), computed as the stable
    product 1 - prod_{i=n-c+1}^{n} (1 - k / i). Raises ValueError when k > n."""
    # BEGIN SOLUTION pass_at_k
    if k > n:
        raise ValueError(f"pass@{k} needs at least {k} samples per problem, got n={n}")
    if n - c < k:
        return 1.0
    return 1.0 - prod(1.0 - k / i for i in range(n - c + 1, n + 1))
    # END SOLUTION


def problem_scores(rows: list, k: int) -> list[float]:
    """Per-problem pass@k from eval rows [{'passed': c, 'verdicts': [n verdicts]}, ...] -> [N] floats."""
    return [pass_at_k(len(r["verdicts"]), r["passed"], k) for r in rows]


def _resampled_means(values: list, resamples: int, seed: int) -> list[float]:
    """R bootstrap means of `values` (problems drawn with replacement), sorted ascending."""
    n = len(values)
    rng = random.Random(seed)
    idx = range(n)
    return sorted(sum(values[i] for i in rng.choices(idx, k=n)) / n for _ in range(resamples))


def _percentiles(sorted_means: list, level: float) -> tuple[float, float]:
    r, tail = len(sorted_means), (1 - level) / 2
    return sorted_means[floor(tail * r)], sorted_means[ceil((1 - tail) * r) - 1]


def bootstrap_ci(values: list, level: float = 0.95, resamples: int = RESAMPLES,
                 seed: int = SEED) -> tuple[float, float]:
    """Percentile-bootstrap interval of mean(values) over problems (module docstring).

    values: [N] per-problem scores in [0, 1]. Returns (lo, hi); (nan, nan) when N = 0.
    >>> bootstrap_ci([1.0] * 5)
    (1.0, 1.0)
    """
    if not values:
        return float("nan"), float("nan")
    return _percentiles(_resampled_means(list(values), resamples, seed), level)


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts b (only A right) and c (only B right):
    p = min(1, 2 * P[X <= min(b, c)]), X ~ Binomial(b + c, 1/2). No discordant pair: p = 1.
    >>> mcnemar_exact(1, 6)   # 2 * (C(7,0) + C(7,1)) / 2^7 = 16 / 128
    0.125
    """
    n = b + c
    if n == 0:
        return 1.0
    return min(1.0, 2 * sum(comb(n, i) for i in range(min(b, c) + 1)) / 2 ** n)


def paired_test(a: list, b: list, resamples: int = RESAMPLES, seed: int = SEED) -> dict:
    """System B against system A on the same problems (a, b: [N] per-problem scores, same order).

    Binary scores -> McNemar's exact test; otherwise the paired bootstrap (module docstring).
    Returns {'method': 'mcnemar'|'bootstrap', 'diff': mean(b) - mean(a), 'p', 'significant': p < ALPHA,
    and 'b', 'c' (discordant counts) for McNemar or 'lo', 'hi' (95 % interval of diff) for the bootstrap}.
    Raises ValueError when the lists differ in length (the systems were not run on the same problems).
    """
    if len(a) != len(b):
        raise ValueError(f"paired test needs the same problems: {len(a)} vs {len(b)} scores")
    if not a:
        return {"method": "none", "diff": 0.0, "p": 1.0, "significant": False}
    diff = (sum(b) - sum(a)) / len(a)
    if all(x in (0.0, 1.0) for x in list(a) + list(b)):
        only_a = sum(1 for x, y in zip(a, b) if x > y)
        only_b = sum(1 for x, y in zip(a, b) if y > x)
        p = mcnemar_exact(only_a, only_b)
        return {"method": "mcnemar", "diff": diff, "p": p, "significant": p < ALPHA, "b": only_a, "c": only_b}
    d = [y - x for x, y in zip(a, b)]
    means = _resampled_means(d, resamples, seed)
    lo, hi = _percentiles(means, 1 - ALPHA)
    below = sum(1 for m in means if m <= 0) / len(means)
    above = sum(1 for m in means if m >= 0) / len(means)
    p = min(1.0, 2 * min(below, above))
    return {"method": "bootstrap", "diff": diff, "p": p, "significant": p < ALPHA, "lo": lo, "hi": hi}
