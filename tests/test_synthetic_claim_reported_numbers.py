"""The numbers summary.json reports for Fig. 5 (sum task, OutRep), Fig. 6 (App. G) and the App. C.1 theory row, each
recomputed here by hand: in range is l <= l_train, beyond is l > l_train (the paper's split), at l_test is the last
length; the theory row's deviation is against Theorem 3.1's closed form (l - (l_train + 1)/2)^2. And Fig. 1c's
claim at a tie: an equal error is not a lower one."""

import numpy as np
import pytest

from torchtune_longshort.synthetic.claims import summarize_claims
from torchtune_longshort.synthetic.outrep import OUTREP_LABELS
from torchtune_longshort.synthetic.train import RunConfig

LT, LTEST = 3, 7
BASE = RunConfig(l_train=LT, l_test=LTEST)
L = np.arange(1, LTEST + 1, dtype=float)
A, B = L ** 2, 10.0 * L  # two seeds with a different value at every length


def _curve(*seeds):
    return {"lengths": L.astype(int).tolist(), "l_train": LT, "mse": [np.asarray(m, float) for m in seeds]}


def test_fig5_and_fig6_split_in_range_and_beyond_at_l_train():
    s = summarize_claims({"5": {"f = y": _curve(A, B)}, "6": {"NoPE": _curve(A, B)}}, BASE)
    beyond = [float(np.mean([v for l, v in zip(L, m) if l > LT])) for m in (A, B)]
    assert s["sum_outrep"]["f = y"] == {"beyond_mse": beyond, "mse_at_l_test": [A[-1], B[-1]]}
    seed_mean = (A + B) / 2
    want = {"in_range_mse": float(np.mean([v for l, v in zip(L, seed_mean) if l <= LT])),
            "beyond_mse": float(np.mean([v for l, v in zip(L, seed_mean) if l > LT])),
            "mse_at_l_test": float(seed_mean[-1])}
    assert s["appendix_g"]["NoPE"] == pytest.approx(want, rel=1e-12)


def test_the_theory_rows_deviation_is_the_largest_beyond_l_train():
    closed = (L - (LT + 1) / 2.0) ** 2
    run = closed.copy()
    run[LT] *= 1.5  # l = l_train + 1: 50% off
    run[-1] *= 1.1  # l = l_test: 10% off
    run[0] = 99.0  # l = 1 (in range): not counted
    figs = {"theory": {"mean": _curve(np.full(LTEST, 1e-9)), "length": _curve(run), "sum": _curve(closed + 1.0)}}
    row = summarize_claims(figs, BASE)["theory_linear_attention"]["length"]
    assert row["max_rel_dev_from_optimum_beyond"] == pytest.approx(0.5, rel=1e-9)
    assert row["closed_form_at_l_test"] == pytest.approx(closed[-1], rel=1e-12)


def test_equal_errors_beyond_l_train_are_not_lower():
    # the claim's words: 1/sqrt gives a *lower* error than identity; the same error is not lower
    fig = {f"f = {OUTREP_LABELS[f]}": _curve(A) for f in OUTREP_LABELS}
    entry = summarize_claims({"1c": fig}, BASE)["outrep_inv_sqrt_beats_identity"]
    assert entry["held"] is bool(A[LT:].mean() < A[LT:].mean())  # False
