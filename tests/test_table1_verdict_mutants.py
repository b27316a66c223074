"""Table 1's verdict words at their edges, each a hand mutant (mutants36) of study/table1/analysis.py passed by
test_study_table1.py's planted records (digits constant, 8 variants, rho > 0 only). References: scipy's spearmanr,
Spearman's closed form 1 - 6 sum d^2 / (n (n^2 - 1)), the brute-force permutation p, and docs/study/table1.md's rule
(``held``: the claim's sign, interval excludes 0 and permutation p < 0.05; ``not measurable``: fewer than 4
variants; figures perplexity rho > 0, passkey accuracy and digits in place rho < 0)."""

import math

import pytest
from scipy import stats
from test_study_stats import _brute_force_p
from test_study_table1 import NAMES, _rec

from torchtune_longshort.eval.tasks.common.lengths import per_length
from torchtune_longshort.study.table1.analysis import analyze, main_correlation, verdict
from torchtune_longshort.study.table1.runner import cell_key

N = 384


def _at(sce, ppl, acc, digits=None):
    recs = {}
    for i, (v, x, p, a) in enumerate(zip(NAMES, sce, ppl, acc)):
        rec = _rec(v, N, x, p, a)
        if digits is not None:
            rec["results"]["longshort_passkey"][per_length("digits", N)] = digits[i]
        recs[cell_key(v, N)] = rec
    return analyze(recs, [N])["per_length"][str(N)]


def _interval(rho, n):
    z, half = math.atanh(rho), stats.norm.ppf(0.975) * math.sqrt(1.06 / (n - 3))
    return pytest.approx(math.tanh(z - half)), pytest.approx(math.tanh(z + half))


def test_digits_in_place_falling_as_the_metric_rises_is_the_claims_direction():
    # mutant: digits' expected sign +1 (as perplexity's) called this "contradicted"
    sce = [5.0, 5.3, 5.1, 6.0, 7.5, 5.6, 8.0, 6.4]
    digits = [1.0 - x / 10 for x in sce]  # the order of sce reversed: rho = -1, exact p = 2 / 8!
    c = main_correlation(_at(sce, sce, [1.0] * 8, digits), "passkey_digits")
    assert c["spearman"] == -1.0 and c["p_permutation"] == pytest.approx(_brute_force_p(sce, digits))
    assert c["expected_sign"] < 0 and c["verdict"] == "held"


def test_a_negative_rho_whose_interval_excludes_0_is_held_for_passkey_and_contradicts_perplexity():
    # mutant: only 'lo > 0' read as excluding 0, so an interval wholly below 0 was "not significant"
    sce = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]
    falling = [8.0, 7.0, 6.0, 4.0, 5.0, 3.0, 2.0, 1.0]  # reversed, one neighbour pair swapped
    at = _at(sce, falling, [v / 10 for v in falling])
    rho = stats.spearmanr(sce, falling).statistic
    assert rho == pytest.approx(-(1 - 6 * 2 / (8 * 63)))  # the closed form against the reversed ranks
    for target, want in (("ppl", "contradicted"), ("passkey", "held")):
        c = main_correlation(at, target)
        assert c["spearman"] == pytest.approx(rho) and (c["spearman_lo"], c["spearman_hi"]) == _interval(rho, 8)
        assert c["spearman_hi"] < 0 and c["p_permutation"] == pytest.approx(_brute_force_p(sce, falling))
        assert c["p_permutation"] < 0.05
        assert c["verdict"] == want, c


def test_four_variants_are_measurable():
    # mutant MIN_N = 5: four variants (Fisher's z defined: n > 3) were "not measurable"; 4! = 24 pairings, so the
    # exact p is at least 2 / 24 and the verdict at best "same direction, not significant"
    sce, ppl = [5.0, 5.1, 5.3, 6.0], [11.0, 10.0, 12.0, 15.0]
    c = main_correlation(_at(sce, ppl, [1.0] * 4), "ppl")
    rho = stats.spearmanr(sce, ppl).statistic
    assert c["n"] == 4 and c["spearman"] == pytest.approx(rho) == pytest.approx(0.8)
    assert (c["spearman_lo"], c["spearman_hi"]) == _interval(rho, 4)
    assert c["p_permutation"] == pytest.approx(_brute_force_p(sce, ppl))
    assert c["verdict"] == "same direction, not significant", c


def test_rho_of_exactly_0_7_is_strong():
    # the doc of strength(): strong at |rho| >= 0.7; mutant '> 0.7' said "moderate". n = 5, sum d^2 = 6
    sce, ppl = [1.0, 2.0, 3.0, 4.0, 5.0], [1.0, 2.0, 4.0, 5.0, 3.0]
    c = main_correlation(_at(sce, ppl, [1.0] * 5), "ppl")
    assert c["spearman"] == pytest.approx(1 - 6 * 6 / (5 * 24)) == pytest.approx(0.7)
    assert c["why"].startswith("strong rho +0.70"), c["why"]


def test_a_rho_of_0_is_not_the_claims_direction():
    # mutant 'rho * expected >= 0': no correlation at all read "same direction". n = 5, sum d^2 = 20: rho = 0
    sce, ppl = [1.0, 2.0, 3.0, 4.0, 5.0], [2.0, 5.0, 3.0, 1.0, 4.0]
    c = main_correlation(_at(sce, ppl, [1.0] * 5), "ppl")
    assert c["spearman"] == pytest.approx(1 - 6 * 20 / (5 * 24), abs=1e-12) and "same direction" not in c["verdict"]


def test_a_permutation_p_of_exactly_0_05_is_not_significant():
    # the rule is p < 0.05 (docs/study/table1.md); mutant 'p <= 0.05' called p = 36 / 720 held
    corr = {"n": 6, "spearman": 0.83, "spearman_lo": 0.1, "spearman_hi": 0.98, "p_permutation": 36 / 720}
    v = verdict(corr, +1, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert v["verdict"] == "same direction, not significant" and "p = 0.05 is not below 0.05" in v["why"], v
