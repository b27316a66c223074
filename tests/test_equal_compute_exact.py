"""equal_compute_steps at the edges a user types: the floor of the exact quotient of the numbers as written
(``fractions.Fraction`` of the decimal), not of its float (110 / 1.1 is 99.99999999999999 in floats), and an
overhead of exactly 1 (no measured overhead) accepted as the docstring's ``>= 1`` says."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from torchtune_longshort.training.equal_compute import equal_compute_steps


@pytest.mark.parametrize("steps, overhead", [(110, "1.1"), (33, "1.1"), (99, "1.1"), (120, "1.2"), (7, "1.75")])
def test_steps_are_the_floor_of_the_exact_quotient(steps, overhead):
    assert equal_compute_steps(steps, float(overhead)) == math.floor(Fraction(steps) / Fraction(overhead))


def test_an_overhead_of_exactly_one_keeps_every_step_and_below_one_is_refused():
    assert equal_compute_steps(50, 1) == 50 and equal_compute_steps(50, 1.0) == 50
    with pytest.raises(ValueError, match="equal_compute_overhead=0.999"):
        equal_compute_steps(50, 0.999)


def test_an_overhead_above_the_steps_still_trains_one_step():
    """The docstring's 'an int >= 1': floor(1 / 2) is 0, a run that would train nothing."""
    assert equal_compute_steps(1, 2.0) == 1 and equal_compute_steps(3, 10.0) == 1
