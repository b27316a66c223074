"""Hand mutants of synthetic/theory.py and misalignment.py that survived test_synthetic_models and
test_synthetic_suffix_range (mutants14).

References: weighted least squares over every bit string written out by itertools.product (numpy's lstsq), the
closed form of a shifted square, and the suffix spread computed by hand from the tokens the model itself was given."""

import itertools
import math

import numpy as np
import pytest
import torch
from synthetic_helpers import decode_bits

from torchtune_longshort.synthetic.misalignment import scalar_misalignment
from torchtune_longshort.synthetic.theory import exact_class_optimum, fit_power_law, fit_shifted_square


def _brute_force_last_query(l_train, l_test):
    """Class A(x_l) + B(x_l) m over every bit string, lengths uniform on 1..l_train, y = l (length task)."""
    feats = lambda bits: [1.0, bits[-1], sum(bits) / len(bits), bits[-1] * sum(bits) / len(bits)]  # noqa: E731
    X, y, w = [], [], []
    for l in range(1, l_train + 1):
        for bits in itertools.product((0, 1), repeat=l):
            X.append(feats(bits)), y.append(float(l)), w.append(0.5**l / l_train)
    sw = np.sqrt(w)
    coef = np.linalg.lstsq(np.array(X) * sw[:, None], np.array(y) * sw, rcond=None)[0]
    err = [np.mean([(np.dot(coef, feats(b)) - l) ** 2 for b in itertools.product((0, 1), repeat=l)])
           for l in range(1, l_test + 1)]
    return coef, err


def test_last_query_optimum_is_the_brute_force_least_squares():
    got = exact_class_optimum("length", 4, 7, query="last")
    coef, err = _brute_force_last_query(4, 7)
    np.testing.assert_allclose(got["error"], err, rtol=1e-9, atol=1e-12)


def test_a_test_range_shorter_than_training_is_refused():
    with pytest.raises(ValueError, match="l_test=5 < l_train=10"):
        exact_class_optimum("length", 10, 5)


def test_shifted_square_finds_where_the_prediction_is_stuck():
    l = np.arange(8.0, 30.0)
    fit = fit_shifted_square(l, (l - 5.5) ** 2)
    assert fit["slope"] == pytest.approx(1.0) and fit["stuck_at"] == pytest.approx(5.5)


def test_a_flat_error_is_stuck_at_no_length_without_a_warning():
    """fit_shifted_square on a flat beyond-range MSE (what Fig. 1b's fits reach when the error stops growing) printed
    numpy's 'divide by zero encountered in scalar divide' and gave stuck_at -inf and R^2 NaN. sqrt(MSE) = 2 is the
    line 0 * l + 2 exactly: slope 0, stuck at no length, R^2 1 (as fit_power_law says of a constant)."""
    import math
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        fit = fit_shifted_square([5.0, 6.0, 7.0], [4.0, 4.0, 4.0])
    assert fit["slope"] == pytest.approx(0.0, abs=1e-12) and math.isnan(fit["stuck_at"]) and fit["r2"] == 1.0


def test_a_constant_error_is_fit_exactly():
    fit = fit_power_law([1.0, 2.0, 4.0], [3.0, 3.0, 3.0])
    assert fit["exponent"] == pytest.approx(0.0, abs=1e-12) and fit["coef"] == pytest.approx(3.0)
    assert fit["r2"] == 1.0  # no residual at all


class _SqrtSumRecorder(torch.nn.Module):
    """Outputs z = sqrt(ones + 1/2) of what it is shown, and keeps each batch's decoded rows."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def forward(self, tokens, read_pos, position_ids=None):
        rows = decode_bits(tokens)
        self.seen.append(rows)
        return torch.tensor([math.sqrt(sum(r) + 0.5) for r in rows], dtype=torch.float64)


def test_spread_in_each_space_is_the_hand_variance_over_the_suffixes_it_was_shown():
    model = _SqrtSumRecorder()
    out = scalar_misalignment(model, "sum", L=6, outrep="sqrt", n_seq=300, bits="uniform_ones", seed=3)
    z = [[math.sqrt(sum(r) + 0.5) for r in rows] for rows in model.seen]
    t = [[float(sum(r)) for r in rows] for rows in model.seen]
    want = {
        "model_f": np.mean([np.var(v) for v in z]),
        "model_y": np.mean([np.var([x * x for x in v]) for v in z]),  # sqrt's inverse is the square
        "target_f": np.mean([np.var([math.sqrt(x) for x in v]) for v in t]),
        "target_y": np.mean([np.var(v) for v in t]),
    }
    for k, v in want.items():
        assert out[k] == pytest.approx(v, rel=1e-9), k
        assert out[k + "_std"] == pytest.approx(math.sqrt(v), rel=1e-9), k
    # bits='uniform_ones' is what was drawn: the full rows' count of ones is uniform on 0..6 (iid gives 0 ones 1/64)
    full = [sum(rows[-1]) for rows in model.seen]
    assert full.count(0) > 300 / 7 / 2


def test_log_targets_of_a_zero_sum_have_no_f_space_spread_and_one_bit_is_refused():
    out = scalar_misalignment(_SqrtSumRecorder(), "sum", L=4, outrep="log", n_seq=20, bits="uniform_ones", seed=0)
    assert math.isnan(out["target_f"]) and not math.isnan(out["target_y"])
    with pytest.raises(ValueError, match="L=1 must be >= 2"):
        scalar_misalignment(_SqrtSumRecorder(), "sum", L=1)
