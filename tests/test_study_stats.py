"""The study report's statistics against scipy (an independent implementation of the same formulas)."""

import math
import random

import pytest
from scipy import stats

from torchtune_longshort.study.stats import correlation, direction, paired_difference, ranks, t_interval


def test_t_interval_matches_scipy():
    vals = [1.3, 0.2, -0.4, 2.2, 0.9]
    got = t_interval(vals)
    lo, hi = stats.t.interval(0.95, len(vals) - 1, loc=stats.tmean(vals), scale=stats.sem(vals))
    assert got["mean"] == pytest.approx(sum(vals) / 5)
    assert (got["lo"], got["hi"]) == (pytest.approx(lo), pytest.approx(hi))
    assert t_interval([3.0])["lo"] is None and t_interval([])["mean"] is None


def test_paired_difference_uses_shared_seeds_only():
    treated = {0: 10.0, 1: 11.25, 2: 12.0, 5: 99.0}
    control = {0: 11.0, 1: 12.5, 2: 13.0, 7: -1.0}
    d = paired_difference(treated, control)
    assert d["seeds"] == [0, 1, 2] and d["values"] == [-1.0, -1.25, -1.0]
    ref = stats.ttest_rel([10.0, 11.25, 12.0], [11.0, 12.5, 13.0]).confidence_interval(0.95)
    assert (d["lo"], d["hi"]) == (pytest.approx(ref.low), pytest.approx(ref.high))
    assert direction(d, lower_is_better=True) == "better" and direction(d, lower_is_better=False) == "worse"
    assert direction({"lo": -1.0, "hi": 2.0}, True) == "no difference"
    assert direction(d, lower_is_better=None) == "lower" and direction({"lo": 0.5, "hi": 2.0}, None) == "higher"
    assert direction(paired_difference({0: 1.0}, {0: 2.0}), True) == "unknown"  # one seed: no interval


def test_ranks_average_ties_like_scipy():
    vals = [3.0, 1.0, 3.0, 2.0, 3.0, 0.5]
    assert ranks(vals) == list(stats.rankdata(vals))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correlation_matches_scipy(seed):
    rng = random.Random(seed)
    x = [rng.gauss(0, 1) for _ in range(30)]
    y = [0.6 * a + rng.gauss(0, 1) for a in x]
    y[3] = y[7]  # a tie
    got = correlation(x, y)
    ref = stats.pearsonr(x, y)
    assert got["n"] == 30 and got["pearson"] == pytest.approx(ref.statistic)
    ci = ref.confidence_interval(0.95)  # scipy's default is the Fisher-z interval
    assert (got["pearson_lo"], got["pearson_hi"]) == (pytest.approx(ci.low), pytest.approx(ci.high))
    assert got["spearman"] == pytest.approx(stats.spearmanr(x, y).statistic)
    z, se = math.atanh(got["spearman"]), math.sqrt(1.06 / 27)
    assert got["spearman_lo"] == pytest.approx(math.tanh(z - 1.959963984540054 * se))


def test_correlation_drops_missing_and_handles_degenerate_input():
    got = correlation([1.0, 2.0, None, 4.0, float("nan")], [2.0, 4.0, 5.0, 8.0, 1.0])
    assert got["n"] == 3 and got["pearson"] == pytest.approx(1.0) and got["pearson_lo"] is None  # n <= 3
    assert correlation([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0])["pearson"] is None  # constant x
    assert correlation([1.0, 2.0], [1.0, 2.0])["spearman"] is None


def _brute_force_p(x, y):
    """Two-sided permutation p of Spearman's rho, enumerating every pairing: rho of a pairing is Pearson's r of
    the ranks (a permutation of ``y`` permutes its average ranks), the observed one scipy's spearmanr."""
    import itertools

    import numpy as np

    obs = abs(stats.spearmanr(x, y).statistic)
    rx, ry = stats.rankdata(x), np.array(list(itertools.permutations(stats.rankdata(y))))
    rx, ry = rx - rx.mean(), ry - ry.mean(axis=1, keepdims=True)
    rho = (ry @ rx) / np.sqrt((ry ** 2).sum(axis=1) * (rx ** 2).sum())
    return float(np.mean(np.abs(rho) >= obs - 1e-12))


@pytest.mark.parametrize("x,y", [
    ([0.1, 0.5, 0.3, 0.9, 0.7, 0.2], [1.0, 2.5, 2.0, 4.0, 3.9, 0.5]),  # n = 6, no ties
    ([3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.6], [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]),  # n = 7, a binary figure (passkey)
    ([1.0, 1.0, 2.0, 3.0, 5.0], [2.0, 1.0, 4.0, 3.0, 3.0]),  # ties on both sides: the null is not symmetric
])
def test_spearman_permutation_p_is_exact_at_small_n(x, y):
    from torchtune_longshort.study.stats import spearman_permutation_p

    assert spearman_permutation_p(x, y) == pytest.approx(_brute_force_p(x, y), abs=1e-12)


def test_spearman_permutation_p_sampled_beyond_exact_and_degenerate_input():
    from torchtune_longshort.study.stats import spearman_permutation_p

    x, y = [0.3, 1.2, 0.8, 2.0, 1.9, 0.1, 1.4], [2.0, 3.1, 2.2, 4.0, 3.0, 1.5, 2.4]
    exact = _brute_force_p(x, y)
    sampled = spearman_permutation_p(x, y, exact_up_to=5, n_resamples=2000)  # 7 > 5: 2000 of the 5040 pairings
    assert sampled == pytest.approx(exact, abs=0.01) and sampled != exact
    assert spearman_permutation_p(x + [None, float("nan")], y + [5.0, 1.0]) == pytest.approx(exact)  # pairs dropped
    assert spearman_permutation_p([1.0, 2.0], [2.0, 1.0]) is None  # n < 3
    assert spearman_permutation_p([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]) is None  # constant x
