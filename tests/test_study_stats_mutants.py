"""Edges of study.stats that hand mutants (mutants36) passed the other stats tests with: Spearman's interval at a
confidence other than 95%, the exact/sampled cut of the permutation p, a figure that is NaN for one variant, and
equal differences in every seed at a large magnitude. Each against a reference computed here."""

import math
from decimal import Decimal

import pytest
from scipy import stats

from test_study_stats import _brute_force_p  # every pairing enumerated, ranks and Pearson written by hand

from torchtune_longshort.study.stats import correlation, direction, paired_difference, spearman_permutation_p


@pytest.mark.parametrize("confidence", [0.5, 0.9])
def test_spearmans_interval_is_the_asked_confidences(confidence):
    # mutant: the normal quantile read at 0.975 whatever the confidence asked (Pearson's followed it, rho's not)
    x, y = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0], [2.0, 1.0, 4.0, 3.0, 7.0, 5.0, 6.0]
    got = correlation(x, y, confidence)
    rho = stats.spearmanr(x, y).statistic
    q = stats.norm.ppf(0.5 + confidence / 2)
    se = math.sqrt(1.06 / (len(x) - 3))  # Fieller, Hartley and Pearson (1957)
    assert (got["spearman_lo"], got["spearman_hi"]) == (pytest.approx(math.tanh(math.atanh(rho) - q * se)),
                                                        pytest.approx(math.tanh(math.atanh(rho) + q * se)))


def test_the_permutation_p_is_exact_at_exactly_exact_up_to_pairs():
    # mutant 'n < exact_up_to': at n == exact_up_to the p was sampled (100 of 5040 pairings), not exact
    x, y = [0.3, 1.2, 0.8, 2.0, 1.9, 0.1, 1.4], [2.0, 3.1, 2.2, 4.0, 3.0, 1.5, 2.4]
    exact = spearman_permutation_p(x, y, exact_up_to=7, n_resamples=100)
    assert exact == pytest.approx(_brute_force_p(x, y), abs=1e-12)


def test_a_figure_not_finite_for_one_variant_leaves_that_pair_out():
    # mutant: only x checked for finiteness; a perplexity of inf / NaN (a diverged cell) entered the ranks
    x = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0]
    y = [2.0, 1.0, float("nan"), 3.0, float("inf"), 5.5]
    got = correlation(x, y)
    keep = [i for i, v in enumerate(y) if math.isfinite(v)]
    xs, ys = [x[i] for i in keep], [y[i] for i in keep]
    assert got["n"] == 4 and got["spearman"] == pytest.approx(stats.spearmanr(xs, ys).statistic)
    assert got["pearson"] == pytest.approx(stats.pearsonr(xs, ys).statistic)
    assert spearman_permutation_p(x, y) == pytest.approx(_brute_force_p(xs, ys), abs=1e-12)


def test_the_same_difference_in_every_seed_at_a_large_value_is_judged_by_the_sign_flip_test():
    # ppl of ~1e5 (a diverged run) against ~1e5 less: each seed's difference is 100000.1 exactly in decimal, and
    # 8e-12 apart in floats; mutant 'sd <= 1e-12' (no scale) called that rounding a certain "worse"
    treated, control = ["191230.3", "185902.4", "194987.5"], ["91230.2", "85902.3", "94987.4"]
    assert len({Decimal(t) - Decimal(c) for t, c in zip(treated, control)}) == 1
    d = paired_difference({s: float(v) for s, v in enumerate(treated)}, {s: float(v) for s, v in enumerate(control)})
    assert d["sign_p"] == pytest.approx(2 / 2 ** 3)  # the two-sided sign-flip test's p with 3 agreeing seeds
    assert direction(d, lower_is_better=True) == "no difference"
