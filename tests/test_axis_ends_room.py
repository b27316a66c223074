"""plots.axes at its ends, third round: hand mutants that test_plot_axis_edges let through. A value axis whose
lowest value lies on a round tick (an accuracy of 0) still ends on a labelled tick beyond its highest; every value and
position axis leaves a marker's room past its end ticks (a point on the last tick is not cut by the spine); a log2
position axis leaves no power of 2 crowding its last position's label. References: the data's own extremes, the
curve's own first and last x, matplotlib's drawn tick labels and window extents."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure
from plot_helpers import draw, no_overlap, ticks

from torchtune_longshort.plots.axes import position_axis, value_axis


def _number(text: str) -> float:
    return float(text.replace("\u2212", "-"))


def _axes(xs, ys, size=(4.0, 3.0)):
    fig = Figure(figsize=size)
    ax = fig.subplots()
    ax.plot(xs, ys, "o")
    return fig, ax


@pytest.mark.parametrize("values", [[0.0, 0.93, 0.41], [4.0, 9.7, 6.1], [10.0, 1000.0, 55.0]])
def test_a_value_axis_ends_on_labelled_ticks_past_its_values_with_room_for_a_marker(values):
    # [0.0, 0.93]: the lowest value on a tick left the axis to matplotlib, whose last label, 0.8, lay under 0.93
    fig, ax = _axes(range(len(values)), values)
    scale = value_axis(ax, values)
    draw(fig)
    got = ticks(ax.yaxis)
    first, last = _number(got[0][1]), _number(got[-1][1])
    assert first <= min(values) and last >= max(values), (scale, got, values)
    lo, hi = sorted(ax.get_ylim())
    assert lo < first and hi > last, ("a point on an end tick sits on the spine", scale, got, lo, hi)


@pytest.mark.parametrize("log2", [False, True])
def test_a_position_axis_leaves_room_past_its_first_and_last_position(log2):
    xs = [0.5 * 2 ** k for k in range(12)] if log2 else list(range(300))
    fig, ax = _axes(xs, [1.0] * len(xs))
    position_axis(ax, xs[0], int(xs[-1]), log2=log2)
    draw(fig)
    got = ticks(ax.xaxis)
    assert (got[0][0], got[-1][0]) == (xs[0], xs[-1]), got
    lo, hi = ax.get_xlim()
    assert lo < xs[0] and hi > xs[-1], (lo, hi)


@pytest.mark.parametrize("n", [2101, 4300, 8300, 16500])
def test_a_log2_position_axis_does_not_crowd_its_last_label(n):
    # the study's base_failure.png over n positions: a power of 2 an octave below the last position, labelled, lay
    # on its label
    from plot_helpers import claims_cfg

    from torchtune_longshort.study.claim_figures import base_figure

    cfg = claims_cfg(ppl_lengths=[1024, n])
    base = {"status": "ok", "results": {"longshort_ppl": {"ppl_1024": 4.5, f"ppl_{n}": 15.4}},
            "curves": {str(k): [4.0 + i / k for i in range(k)] for k in (1024, n)}}
    fig = draw(base_figure(cfg, base))
    ax = fig.axes[1]
    assert ticks(ax.xaxis)[-1] == (n - 1, str(n - 1))
    no_overlap([t for t in ax.get_xticklabels() if t.get_text()], fig.canvas.get_renderer())


def test_both_axes_widened_say_so_in_two_lines_and_a_legend_under_them_starts_below_both():
    from torchtune_longshort.plots.axes import WIDENED_GID, below_x_axis

    xs, ys = [100.0, 101.0, 102.0], [50.0, 50.5, 51.0]
    fig, ax = _axes(xs, ys)
    ax.lines[0].set_label("a")
    ax.set_xlabel("sequence length (tokens)")
    value_axis(ax, xs, axis="x")
    value_axis(ax, ys, axis="y")
    legend = ax.legend(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below_x_axis(ax))
    draw(fig)
    note = next(t for t in ax.texts if t.get_gid() == WIDENED_GID)
    assert [line.split(":")[0] for line in note.get_text().split("\n")] == ["x axis widened", "y axis widened"]
    r = fig.canvas.get_renderer()
    assert not note.get_window_extent(r).overlaps(legend.get_window_extent(r))


@pytest.mark.parametrize("width,last", [(4.0, 2100), (3.0, 2100), (2.0, 600), (6.4, 2100)])
def test_a_log2_position_axis_drops_a_power_of_2_whose_label_would_touch_a_neighbours(width, last):
    # a 4-inch axes 0.5 .. 2100: '1k' and '2100', an octave apart, overlapped by 1.3 px (the rule counted octaves)
    xs = [0.5, 8.0, float(last)]
    fig, ax = _axes(xs, [1.0] * len(xs), size=(width, 3.0))
    position_axis(ax, xs[0], last, log2=True)
    draw(fig)
    got = ticks(ax.xaxis)
    assert (got[0], got[-1]) == ((0.5, "0.5"), (last, str(last))), got
    assert len(got) >= 4, got  # room for powers of 2 between is kept
    no_overlap([t for t in ax.get_xticklabels() if t.get_text()], fig.canvas.get_renderer())
