"""The fits of Theorem 3.1's growth refuse what has no fit: fewer than 2 points, and (log-log) an x or y of 0, whose
log numpy gives as -inf."""

import numpy as np
import pytest

from torchtune_longshort.synthetic.theory import fit_power_law, fit_shifted_square


def test_a_zero_x_has_no_log_and_is_refused():
    with np.errstate(divide="ignore"):
        assert np.log(0.0) == -np.inf  # the reference: no finite log of 0
    with pytest.raises(ValueError, match="x > 0 and y > 0"):
        fit_power_law([0.0, 1.0, 2.0], [1.0, 2.0, 4.0])
    with pytest.raises(ValueError, match="x > 0 and y > 0"):
        fit_power_law([1.0, 2.0, 3.0], [0.0, 2.0, 4.0])


def test_one_point_is_refused_by_both_fits():
    with pytest.raises(ValueError, match=">= 2 points"):
        fit_power_law([2.0], [4.0])
    with pytest.raises(ValueError, match=">= 2 points"):
        fit_shifted_square([2.0], [4.0])
