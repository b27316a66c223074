"""A step whose loss or gradient norm is infinite (not only NaN) stops the run before the optimizer step, as the
module says ('the first non-finite loss or gradient norm'): ``math.isfinite`` is the reference, inf and -inf
included (clipping by an infinite norm scales every gradient to 0: the run would go on without learning)."""

from __future__ import annotations

import math

import pytest

from torchtune_longshort.training.step_checks import NonFiniteStep, check_finite_losses, check_finite_norms


@pytest.mark.parametrize("bad", [math.inf, -math.inf, math.nan])
def test_an_infinite_or_nan_loss_or_norm_stops_the_step(bad):
    assert not math.isfinite(bad)
    with pytest.raises(NonFiniteStep, match=f"non-finite loss {bad} at step 3"):
        check_finite_losses([[1.0, 1.0, 0.0], [bad, 1.0, 0.0]], lambda i: "step 3")
    with pytest.raises(NonFiniteStep, match=f"non-finite gradient norm {bad} at step 3"):
        check_finite_norms({"grad_norm": bad}, lambda: "step 3")
    check_finite_losses([[2.0, 1.5, 5.0]], lambda i: "step 3")
    check_finite_norms({"grad_norm": 1e30, "rope_grad_norm": 0.0}, lambda: "step 3")
