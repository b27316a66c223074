"""The value-axis rules of plots/axes.py at their exact boundaries (mutants21): each comparison there is "at or
beyond", as its docstring says, and a mutant that made one strict passed the plot tests. References: the module
docstring's rules (a log scale when the values span a decade or more; a linear axis spans at least a quarter of the
largest |value|; 1-2-5 ticks over up to three decades) evaluated by hand at values that land exactly on them."""

from __future__ import annotations

import math

from matplotlib.figure import Figure

from torchtune_longshort.plots.axes import value_axis, value_limits


def test_values_spread_by_exactly_a_quarter_of_the_largest_keep_their_own_span():
    assert 100.0 - 75.0 == 0.25 * 100.0  # exactly the rule's quarter, no rounding
    assert value_limits([75.0, 100.0]) is None
    assert value_limits([75.5, 100.0]) is not None  # a hair less: widened


def test_values_one_decade_apart_go_on_a_log_axis():
    ax = Figure().add_subplot()
    assert value_axis(ax, [3.0, 30.0]) == "log" and ax.get_yscale() == "log"
    assert value_axis(Figure().add_subplot(), [3.0, 29.9]) == "linear"


def test_three_decades_still_get_1_2_5_ticks():
    assert math.log10(1000.0) == 3.0
    ax = Figure().add_subplot()
    value_axis(ax, [1.0, 1000.0])
    ticks = [t for t in ax.yaxis.get_major_locator().tick_values(1.0, 1000.0) if 1.0 <= t <= 1000.0]
    assert any(math.isclose(t, 2.0) for t in ticks) and any(math.isclose(t, 500.0) for t in ticks), ticks

