"""windows.py's refusals and edges that hand mutants showed no test held (test_windows, test_loss, test_dual_window,
test_config_bad_values, test_api_cli_same_words all passed with each): a bool or a fractional float as an e_range
bound, a range given high-low, a Table 7 fraction of L floored one token low (0.29L at L=100 is 28.999999999999996
in floats), a min_context of exactly L, and a model output of the wrong row count unstacked (test_dual_window's
test_bad_inputs holds a division by 0 and an upper bound past L; here with their words). The references: exact
decimal arithmetic (fractions.Fraction) for the bounds, the module docstring's ranges ([1, L], lo <= hi) for the
rest."""

import math
from fractions import Fraction

import pytest
import torch

from torchtune_longshort.windows import parse_e_bound, resolve_e_range, resolve_min_context, unstack_window_outputs


@pytest.mark.parametrize("coef", ["0.05", "0.07", "0.29", "0.57", "0.58", "0.9"])
def test_a_fraction_of_L_is_floored_as_exact_decimals_floor_it(coef):
    for L in (100, 200, 1000, 4096):
        assert parse_e_bound(f"{coef}L", L) == math.floor(Fraction(coef) * L), (coef, L)
    assert math.floor(0.29 * 100) == 28 and math.floor(0.57 * 100) == 56  # what a plain float floor gives


@pytest.mark.parametrize("bound, said", [
    (True, r"e_range bound True is not a number or an expression in L"),
    (1.5, r"e_range bound 1.5: a float bound is ambiguous; write an int or an expression like '0.05L'"),
    ("L/0", r"e_range bound 'L/0' divides by 0"),
])
def test_a_bound_that_is_no_token_count_is_refused_by_name(bound, said):
    with pytest.raises(ValueError, match=said):
        parse_e_bound(bound, 16)
    assert parse_e_bound(2.0, 16) == 2  # a whole float is its int


@pytest.mark.parametrize("e_range, said", [
    ([1, "2L"], r"resolves to \[1, 32\] for L=16: both bounds must lie in \[1, L=16\]"),
    ([0, 4], r"resolves to \[0, 4\] for L=16: both bounds must lie in \[1, L=16\]"),
    ([5, 4], r"resolves to \[5, 4\] for L=16: lo > hi; give the smaller bound first"),
])
def test_a_range_outside_one_to_L_or_reversed_is_refused(e_range, said):
    with pytest.raises(ValueError, match=said):
        resolve_e_range(e_range, 16)
    assert resolve_e_range([4, 4], 16) == (4, 4) and resolve_e_range([1, "L"], 16) == (1, 16)


def test_min_context_takes_L_itself_and_refuses_past_it():
    assert resolve_min_context(16, 16) == 16
    with pytest.raises(ValueError, match=r"min_context=17 must be in \[1, L=16\]"):
        resolve_min_context(17, 16)


def test_an_output_of_other_than_twice_the_batch_rows_is_refused():
    a, b = unstack_window_outputs(torch.arange(4.0)[:, None], 2)
    assert a.tolist() == [[0.0], [1.0]] and b.tolist() == [[2.0], [3.0]]
    for rows in (3, 5):
        with pytest.raises(ValueError, match=rf"the output has {rows} rows, not 2 x bsz=2"):
            unstack_window_outputs(torch.zeros(rows, 1), 2)
        with pytest.raises(ValueError, match=rf"the output has {rows} rows"):
            unstack_window_outputs([torch.zeros(rows, 1)], 2)
