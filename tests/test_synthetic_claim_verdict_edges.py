"""Hand mutants of synthetic/claims.py that survived test_synthetic_claim_wording and test_synthetic_replot
(mutants15): each claim's verdict near its own threshold.

References: each claim decided in the test by the words of its CLAIM_STATEMENTS entry, written out naively on curves
built to sit between a mutant's reading and the statement's; Theorem 3.1's fit on an exact (l - (l_train+1)/2)^2
(exponent 2, r^2 1), and the sum task's two constants (l+1)/(4l) and (l+1)/(2l) written out from theory.py's
docstring."""

from __future__ import annotations

import numpy as np

from torchtune_longshort.synthetic.claims import summarize_claims
from torchtune_longshort.synthetic.models import PE_LABELS
from torchtune_longshort.synthetic.outrep import OUTREP_LABELS
from torchtune_longshort.synthetic.train import RunConfig

LT, LTEST = 4, 10
BASE = RunConfig(l_train=LT, l_test=LTEST)


def _curve(*seeds, l_train=LT) -> dict:
    return {"lengths": list(range(1, LTEST + 1)), "l_train": l_train, "mse": [np.asarray(m, float) for m in seeds]}


def _rising(ratio: float) -> np.ndarray:
    """In-range MSE 1 (l <= LT), beyond-range MSE ``ratio`` (l > LT)."""
    return np.r_[np.ones(LT), np.full(LTEST - LT, float(ratio))]


def _every_pe_and_seed_over_100x(fig: dict) -> bool:
    return all(m[LT:].mean() > 100 * m[:LT].mean() for d in fig.values() for m in d["mse"])


def test_the_length_claim_needs_every_seed_over_100x():
    for seeds in [(_rising(50), _rising(1000)), (_rising(1000), _rising(1000)), (_rising(99), _rising(99))]:
        fig = {PE_LABELS[pe]: _curve(*seeds) for pe in PE_LABELS}
        entry = summarize_claims({"1b": fig}, BASE)["length_rises_for_every_pe"]
        assert entry["held"] is _every_pe_and_seed_over_100x(fig), seeds
        want = min(m[LT:].mean() / m[:LT].mean() for m in seeds)
        assert entry["per_pe"][PE_LABELS["nope"]]["min_ratio_beyond_over_in"] == want


def test_the_mean_claim_reads_every_length_not_the_last():
    # NoPE's error 2e-4 at an in-range length, 1e-5 elsewhere: not below 1e-4 "at every test length"
    nope = np.full(LTEST, 1e-5)
    nope[1] = 2e-4
    fig = {PE_LABELS[pe]: _curve(nope, nope) for pe in PE_LABELS}
    entry = summarize_claims({"1a": fig}, BASE)["mean_nope_flat"]
    assert entry["held"] is bool(all(v < 1e-4 for v in np.mean([nope, nope], 0)))  # False


def test_the_outrep_claim_compares_beyond_l_train_only():
    # 1/sqrt is lower at every l > l_train, but far higher at l = l_train itself (not beyond it)
    ident = _rising(10.0)
    isq = _rising(9.0)
    isq[LT - 1] = 1000.0
    labels = {f: f"f = {OUTREP_LABELS[f]}" for f in OUTREP_LABELS}
    fig = {labels[f]: _curve(isq if f == "inv_sqrt" else ident) for f in OUTREP_LABELS}
    entry = summarize_claims({"1c": fig}, BASE)["outrep_inv_sqrt_beats_identity"]
    assert entry["held"] is bool(isq[LT:].mean() < ident[LT:].mean())  # True
    assert entry["inv_sqrt_beyond_mse"] == [isq[LT:].mean()]


def _fig4(at_l_test: dict, in_range: float = 1.0) -> dict:
    out = {}
    for lt, last in at_l_test.items():
        m = np.full(LTEST, in_range)
        m[-1] = last
        out[f"l_train = {lt}"] = _curve(m, l_train=lt)
    return out


def _longer_lowers_not_removes(fig: dict) -> bool:
    rows = sorted((d["l_train"], np.mean(d["mse"], 0)) for d in fig.values())
    last = [m[-1] for _, m in rows]
    return (all(a > b for a, b in zip(last, last[1:]))
            and all(m[-1] > 10 * m[:lt].mean() for lt, m in rows))


def test_the_l_train_claim_needs_a_strict_decrease_and_10x():
    for at_l_test in [{2: 500.0, 4: 500.0}, {2: 500.0, 4: 5.0}, {2: 500.0, 4: 50.0}]:
        fig = _fig4(at_l_test)
        entry = summarize_claims({"4": fig}, BASE)["longer_l_train_lowers_not_removes"]
        assert entry["held"] is _longer_lowers_not_removes(fig), at_l_test


def test_theorem_3_1_fit_of_an_exact_square_beyond_the_mean_training_length():
    lt, l = LT, np.arange(1, LTEST + 1)
    y = (l - (lt + 1) / 2.0) ** 2  # exactly Theorem 3.1's error of a prediction stuck at the mean training length
    fig = {"l_train = 4": _curve(y, l_train=lt)}
    fit = summarize_claims({"4": fig}, BASE)["theorem_3_1_quadratic"]["fits"]["4: l_train = 4"]
    assert abs(fit["vs_l_minus_mean_train_length"]["exponent"] - 2.0) < 1e-9
    assert abs(fit["vs_l_minus_mean_train_length"]["r2"] - 1.0) < 1e-9
    assert abs(fit["shifted_square"]["stuck_at"] - (lt + 1) / 2.0) < 1e-9


def _sum_closed_form(l, lt, c):
    ls = np.arange(1, lt + 1)
    lbar, H = ls.mean(), 1.0 / np.mean(1.0 / ls)
    A = (lbar - H) / 2
    return A * A + A * (H - l) + (H - l) ** 2 * c


def test_the_theory_row_says_which_constant_the_sum_run_matches():
    l = np.arange(1, LTEST + 1, dtype=float)
    for c, word in (((l + 1) / (4 * l), "binomial"), ((l + 1) / (2 * l), "doubled")):
        mse = _sum_closed_form(l, LT, c) * 1.01
        tasks = {"mean": _curve(np.full(LTEST, 1e-9)), "length": _curve((l - 2.5) ** 2 + 1e-3), "sum": _curve(mse)}
        row = summarize_claims({"theory": tasks}, BASE)["theory_linear_attention"]["sum"]
        assert row["matches"].startswith(word), (word, row["matches"])


def test_an_older_summarys_quick_meta_reaches_each_figure_it_drew():
    from torchtune_longshort.synthetic.claims import figure_records

    # a summary.json written before meta.figures: one command's meta, its figures named by its misalignment entries
    for quick in (True, False):
        meta = {"base_config": {"l_train": LT}, "quick": quick, "seeds": [0, 1]}
        old = {"meta": meta, "scalar_misalignment": {"1a: NoPE": {}, "4: l_train = 4": {}}}
        want = {n: {"base_config": meta["base_config"], "quick": quick, "seeds": [0, 1]} for n in ("1a", "4")}
        assert figure_records(old) == want
