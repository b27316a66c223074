"""The study report's statistics (scipy's) against closed forms and naive implementations written here."""

import itertools
import math
import random

import numpy as np
import pytest

from torchtune_longshort.study.stats import (
    correlation,
    direction,
    paired_difference,
    spearman_permutation_p,
    t_interval,
)

Z975 = 1.959963984540054  # the normal's 0.975 quantile
# Student t's 0.975 quantile in closed form: 1 degree of freedom (Cauchy) tan(pi (p - 1/2)); 2: (2p - 1) / sqrt(2p(1-p))
T975 = {1: math.tan(math.pi * 0.475), 2: 0.95 / math.sqrt(2 * 0.975 * 0.025)}


def naive_ranks(values):
    """1-based ranks, a tie given the mean of the ranks it spans: counted pair by pair."""
    return [sum(w < v for w in values) + (sum(w == v for w in values) + 1) / 2 for v in values]


def naive_pearson(x, y):
    mx, my = sum(x) / len(x), sum(y) / len(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    return sxy / math.sqrt(sum((a - mx) ** 2 for a in x) * sum((b - my) ** 2 for b in y))


def fisher(r, n, se_scale):
    z, se = math.atanh(r), math.sqrt(se_scale / (n - 3))
    return math.tanh(z - Z975 * se), math.tanh(z + Z975 * se)


@pytest.mark.parametrize("vals", [[1.3, 0.2], [1.3, 0.2, -0.4]])
def test_t_interval_is_the_closed_form_at_one_and_two_degrees_of_freedom(vals):
    got = t_interval(vals)
    n = len(vals)
    mean = sum(vals) / n
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (n - 1))
    half = T975[n - 1] * sd / math.sqrt(n)
    assert got["mean"] == pytest.approx(mean) and got["sd"] == pytest.approx(sd)
    assert (got["lo"], got["hi"]) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert t_interval([3.0])["lo"] is None and t_interval([])["mean"] is None


def test_t_half_width_is_the_closed_form_and_refuses_one_value():
    # a hand mutant letting n=1 through returned NaN (0 degrees of freedom) to a caller, where it says why not
    from torchtune_longshort.intervals import t_half_width

    assert t_half_width(0.5, 2) == pytest.approx(T975[1] * 0.5 / math.sqrt(2))
    assert t_half_width(0.5, 3) == pytest.approx(T975[2] * 0.5 / math.sqrt(3))
    for n in (1, 0):
        with pytest.raises(ValueError, match=rf"^n={n}: a t interval needs at least 2 values$"):
            t_half_width(0.5, n)


@pytest.mark.parametrize("confidence", [0.5, 0.9, 0.99])
def test_an_interval_asked_at_another_confidence_is_that_confidences(confidence):
    # hand mutants (mutants13) of t_interval not passing confidence on, and of t_half_width reading CONFIDENCE for
    # it, gave a 95% interval to every caller asking for another; Student t's closed forms at 1 and 2 degrees of
    # freedom for the quantile p = 1/2 + c/2: tan(pi (p - 1/2)) and (2p - 1) / sqrt(2p(1-p))
    from torchtune_longshort.intervals import t_half_width

    p = 0.5 + confidence / 2
    t1, t2 = math.tan(math.pi * (p - 0.5)), (2 * p - 1) / math.sqrt(2 * p * (1 - p))
    assert t_half_width(0.5, 2, confidence) == pytest.approx(t1 * 0.5 / math.sqrt(2))
    vals = [1.3, 0.2, -0.4]
    mean, sd = sum(vals) / 3, math.sqrt(sum((v - sum(vals) / 3) ** 2 for v in vals) / 2)
    got = t_interval(vals, confidence)
    assert (got["lo"], got["hi"]) == (pytest.approx(mean - t2 * sd / math.sqrt(3)),
                                      pytest.approx(mean + t2 * sd / math.sqrt(3)))
    d = paired_difference({0: 1.3, 1: 0.2, 2: -0.4}, {0: 0.0, 1: 0.0, 2: 0.0}, confidence)
    assert (d["lo"], d["hi"]) == (got["lo"], got["hi"])


def test_paired_difference_uses_shared_seeds_only():
    treated = {0: 10.0, 1: 11.25, 2: 12.0, 5: 99.0}
    control = {0: 11.0, 1: 12.5, 2: 13.0, 7: -1.0}
    d = paired_difference(treated, control)
    assert d["seeds"] == [0, 1, 2] and d["values"] == [-1.0, -1.25, -1.0]
    mean, sd = -3.25 / 3, math.sqrt(((0.25 / 3) ** 2 * 2 + (0.5 / 3) ** 2) / 2)  # differences -1, -1.25, -1
    half = T975[2] * sd / math.sqrt(3)
    assert (d["lo"], d["hi"]) == (pytest.approx(mean - half), pytest.approx(mean + half))
    assert direction(d, lower_is_better=True) == "better" and direction(d, lower_is_better=False) == "worse"
    assert direction({"lo": -1.0, "hi": 2.0}, True) == "no difference"
    assert direction(d, lower_is_better=None) == "lower" and direction({"lo": 0.5, "hi": 2.0}, None) == "higher"
    assert direction(paired_difference({0: 1.0}, {0: 2.0}), True) == "unknown"  # one seed: no interval


@pytest.mark.parametrize("n, want", [(3, "no difference"), (5, "no difference"), (6, "better")])
def test_the_same_difference_in_every_seed_is_judged_by_the_sign_flip_test(n, want):
    # The GPU study's BABILong cell: one more of the same 18 questions answered in each of 3 seeds, +1/18 every time;
    # the t interval was [1/18, 1/18] and called it "better". The seeds alone say: a two-sided sign-flip test.
    import itertools

    treated, control = {s: 1 / 18 for s in range(n)}, {s: 0.0 for s in range(n)}
    d = paired_difference(treated, control)
    diffs = d["values"]
    flips = [sum(f * x for f, x in zip(signs, diffs)) for signs in itertools.product((1, -1), repeat=n)]
    p = sum(abs(t) >= abs(sum(diffs)) - 1e-15 for t in flips) / len(flips)  # brute force over all 2**n flips
    assert d["sign_p"] == pytest.approx(p) == pytest.approx(2 / 2 ** n)
    assert direction(d, lower_is_better=False) == want
    assert direction(d, lower_is_better=True) == {"better": "worse"}.get(want, want)
    # equal to within float rounding counts as equal; no difference at all stays the plain "no difference"
    assert paired_difference({0: 0.1 + 0.2, 1: 0.3, 2: 0.3}, {0: 0.2, 1: 0.2, 2: 0.2})["sign_p"] is not None
    same = paired_difference({0: 0.0, 1: 0.0}, {0: 0.0, 1: 0.0})
    assert "sign_p" not in same and direction(same, True) == "no difference"


def test_correlation_closed_form():
    # x = 1..5, y a swap of two neighbour pairs: sum of squares 10 each, sum of products 8, so r = rho = 0.8
    got = correlation([1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 1.0, 4.0, 3.0, 5.0])
    assert got["pearson"] == pytest.approx(0.8) and got["spearman"] == pytest.approx(0.8)
    lo, hi = math.tanh(math.atanh(0.8) - Z975 / math.sqrt(2)), math.tanh(math.atanh(0.8) + Z975 / math.sqrt(2))
    assert (got["pearson_lo"], got["pearson_hi"]) == (pytest.approx(lo), pytest.approx(hi))
    # ties: x ranks 1, 2.5, 2.5, 4 against y ranks 1, 2, 3, 4: rho = 4.5 / sqrt(4.5 * 5), not Pearson's r (0.83)
    got = correlation([1.0, 2.0, 2.0, 10.0], [10.0, 20.0, 30.0, 40.0])
    assert got["spearman"] == pytest.approx(4.5 / math.sqrt(22.5)) and got["pearson"] == pytest.approx(0.831, abs=1e-3)
    exact = correlation([1.0, 2.0, 3.0, 4.0, 5.0], [3.0, 5.0, 7.0, 9.0, 11.0])  # |r| = 1: Fisher's z infinite
    assert exact["pearson"] == pytest.approx(1.0) and exact["pearson_lo"] is exact["pearson_hi"] is None


def test_a_perfect_ranking_is_exactly_plus_or_minus_one():
    # n = 5: scipy's spearmanr gives 0.9999999999999999 here; Table 1 judges |rho| = 1 by the exact p (no interval)
    x = [1.0, 2.0, 3.0, 4.0, 5.0]
    up, down = correlation(x, [v ** 3 for v in x]), correlation(x, [-v for v in x])
    assert (up["spearman"], up["spearman_lo"], up["spearman_hi"]) == (1.0, None, None)  # not the interval [1, 1]
    assert (down["spearman"], down["spearman_lo"], down["spearman_hi"]) == (-1.0, None, None)
    assert correlation([1.0, 2.0, 2.0, 3.0, 7.0], [0.0, 5.0, 5.0, 6.0, 9.0])["spearman"] == 1.0  # tied alike


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_correlation_matches_naive_pearson_on_values_and_ranks(seed):
    rng = random.Random(seed)
    x = [rng.gauss(0, 1) for _ in range(30)]
    y = [0.6 * a + rng.gauss(0, 1) for a in x]
    y[3] = y[7]  # a tie
    got = correlation(x, y)
    r, rho = naive_pearson(x, y), naive_pearson(naive_ranks(x), naive_ranks(y))
    assert got["n"] == 30 and got["pearson"] == pytest.approx(r) and got["spearman"] == pytest.approx(rho)
    assert (got["pearson_lo"], got["pearson_hi"]) == tuple(pytest.approx(v) for v in fisher(r, 30, 1.0))
    assert (got["spearman_lo"], got["spearman_hi"]) == tuple(pytest.approx(v) for v in fisher(rho, 30, 1.06))


def test_correlation_drops_missing_and_handles_degenerate_input():
    got = correlation([1.0, 2.0, None, 4.0, float("nan")], [2.0, 4.0, 5.0, 8.0, 1.0])
    assert got["n"] == 3 and got["pearson"] == pytest.approx(1.0) and got["pearson_lo"] is None  # n <= 3
    assert correlation([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0])["pearson"] is None  # constant x
    assert correlation([1.0, 2.0], [1.0, 2.0])["spearman"] is None


def _brute_force_p(x, y):
    """Two-sided permutation p of Spearman's rho, enumerating every pairing: rho of a pairing is Pearson's r of
    the ranks (a permutation of ``y`` permutes its average ranks)."""
    rx, ry = np.array(naive_ranks(x)), np.array(list(itertools.permutations(naive_ranks(y))))
    obs = abs(naive_pearson(naive_ranks(x), naive_ranks(y)))
    rx, ry = rx - rx.mean(), ry - ry.mean(axis=1, keepdims=True)
    rho = (ry @ rx) / np.sqrt((ry ** 2).sum(axis=1) * (rx ** 2).sum())
    return float(np.mean(np.abs(rho) >= obs - 1e-12))


@pytest.mark.parametrize("x,y", [
    ([0.1, 0.5, 0.3, 0.9, 0.7, 0.2], [1.0, 2.5, 2.0, 4.0, 3.9, 0.5]),  # n = 6, no ties
    ([3.0, 1.0, 4.0, 1.5, 5.0, 9.0, 2.6], [1.0, 0.0, 1.0, 0.0, 1.0, 1.0, 0.0]),  # n = 7, a binary figure (passkey)
    ([1.0, 1.0, 2.0, 3.0, 5.0], [2.0, 1.0, 4.0, 3.0, 3.0]),  # ties on both sides: the null is not symmetric
])
def test_spearman_permutation_p_is_exact_at_small_n(x, y):
    assert spearman_permutation_p(x, y) == pytest.approx(_brute_force_p(x, y), abs=1e-12)


def test_spearman_permutation_p_sampled_beyond_exact_and_degenerate_input():
    x, y = [0.3, 1.2, 0.8, 2.0, 1.9, 0.1, 1.4], [2.0, 3.1, 2.2, 4.0, 3.0, 1.5, 2.4]
    exact = _brute_force_p(x, y)
    sampled = spearman_permutation_p(x, y, exact_up_to=5, n_resamples=2000)  # 7 > 5: 2000 of the 5040 pairings
    assert sampled == pytest.approx(exact, abs=0.01) and sampled != exact
    assert spearman_permutation_p(x + [None, float("nan")], y + [5.0, 1.0]) == pytest.approx(exact)  # pairs dropped
    assert spearman_permutation_p([1.0, 2.0], [2.0, 1.0]) is None  # n < 3
    assert spearman_permutation_p([1.0, 1.0, 1.0, 1.0], [1.0, 2.0, 3.0, 4.0]) is None  # constant x
