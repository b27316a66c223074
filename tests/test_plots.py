"""Every report plot rendered on edge-case data, checked through matplotlib's own objects (scales, tick texts,
offset text, title and axes extents), not file sizes: near-equal values, values spanning decades, one-row and
one-column heatmaps."""

from __future__ import annotations

import math

import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from torchtune_longshort.eval.long_ppl import curves_figure
from torchtune_longshort.eval.report_figures import heatmap_figure, ppl_figure
from torchtune_longshort.study.figures import babilong_figure, line_figure


def _draw(fig):
    FigureCanvasAgg(fig).draw()
    return fig


def _ticks(axis):
    """(location, text) of the major ticks inside the view, after a draw."""
    lo, hi = sorted(axis.get_view_interval())
    out = []
    for loc, lab in zip(axis.get_majorticklocs(), axis.get_majorticklabels()):
        if lo - 1e-12 * abs(hi) <= loc <= hi + 1e-12 * abs(hi):
            out.append((loc, lab.get_text()))
    return out


def _check_plain_value_axis(axis, min_ticks=3):
    """Tick texts are plain numbers equal to their tick positions (so no hidden offset or exponent), distinct, and
    there is no offset text."""
    assert axis.get_offset_text().get_text() == ""
    ticks = _ticks(axis)
    assert len(ticks) >= min_ticks, ticks
    for loc, text in ticks:
        assert not any(c in text for c in "×$^e"), text
        assert math.isclose(float(text.replace("−", "-")), loc, rel_tol=1e-5, abs_tol=1e-9), (loc, text)
    assert len({t for _, t in ticks}) == len(ticks), ticks


def _no_overlap(labels, renderer):
    boxes = [t.get_window_extent(renderer) for t in labels if t.get_text()]
    for i, a in enumerate(boxes):
        for b in boxes[i + 1:]:
            assert not a.overlaps(b), (a, b)


def _inside_figure(fig, artist):
    r = fig.canvas.get_renderer()
    box, page = artist.get_window_extent(r), fig.bbox
    inside = box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1
    assert inside, (box, page)


def test_ppl_near_equal_values_linear_with_plain_ticks():
    runs = {"a": {"long_ppl": {"ppl_128": 110.072, "ppl_256": 110.0745, "ppl_1k": 110.079}},
            "b": {"long_ppl": {"ppl_128": 110.0731, "ppl_256": 110.0752}}}
    fig = _draw(ppl_figure(runs))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    _check_plain_value_axis(ax.yaxis)
    assert [t for _, t in _ticks(ax.xaxis)] == ["128", "256", "1k"]
    assert ax.get_xlabel() == "sequence length (tokens)" and ax.get_ylabel() == "perplexity"
    _no_overlap(ax.get_yticklabels(), fig.canvas.get_renderer())


def test_ppl_over_decades_log_with_plain_ticks():
    runs = {"a": {"long_ppl": {"ppl_128": 9.5, "ppl_512": 80.0, "ppl_2k": 2500.0}}}
    fig = _draw(ppl_figure(runs))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    _check_plain_value_axis(ax.yaxis)
    assert {"10", "100", "1000"} <= {t for _, t in _ticks(ax.yaxis)}
    assert [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()] == []


def test_ppl_single_length():
    fig = _draw(ppl_figure({"a": {"long_ppl": {"ppl_256": 12.0}}}))
    assert [t for _, t in _ticks(fig.axes[0].xaxis)] == ["256"]
    _check_plain_value_axis(fig.axes[0].yaxis, min_ticks=2)


@pytest.mark.parametrize("lengths, depths", [([(1024, "1k")], [0, 25, 50, 75, 100]),
                                             ([(256, "256"), (512, "512"), (1024, "1k"), (2048, "2k")], [50])])
def test_heatmap_one_column_or_one_row(lengths, depths):
    grid = {L: {d: 0.5 for d in depths} for L in lengths}
    title = "longshort_passkey: accuracy by depth x length (a-rather-long-run-label-from-a-folder-name)"
    fig = _draw(heatmap_figure(grid, title))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [lab for _, lab in lengths]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"{d}%" for d in depths]
    bbox = ax.get_window_extent(fig.canvas.get_renderer())
    assert bbox.width / fig.dpi >= 1.0 and bbox.height / fig.dpi >= 0.5  # cells not squeezed to a sliver
    title_artist = fig._suptitle
    assert "".join(title_artist.get_text().split()) == "".join(title.split())
    _inside_figure(fig, title_artist)  # not clipped
    for lab in ax.get_xticklabels() + ax.get_yticklabels() + [ax.xaxis.label, ax.yaxis.label]:
        _inside_figure(fig, lab)


def _cfg(lengths, **eval_extra):
    return {"L0": 128, "L": 256, "methods": {"pi": {"method": "linear"}}, "alphas": [0.0, 0.3], "seeds": [0],
            "eval": {"misalignment_lengths": lengths, "ppl_lengths": lengths, **eval_extra}}


def _table(values_by_alpha, lengths):
    from torchtune_longshort.eval.lengths import length_label

    rows = []
    for a, vals in values_by_alpha.items():
        rows.append({"label": f"alpha {a}", "alpha": a,
                     "cells": {length_label(n): {"mean": v, "sd": None} for n, v in zip(lengths, vals)}})
    return {"methods": {"pi": rows}}


def test_study_misalignment_near_equal_no_offset():
    # The quick study's numbers: SCE 12.19 at both lengths, alpha 0.3 lower by ~1e-3.
    lengths = [256, 512]
    t = _table({0.0: [12.19421, 12.19433], 0.3: [12.19276, 12.19268]}, lengths)
    fig = _draw(line_figure(_cfg(lengths), t, lengths, "misalignment (SCE, Eq. 4)"))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    _check_plain_value_axis(ax.yaxis)
    assert all(t.startswith("12.19") for _, t in _ticks(ax.yaxis))
    assert [t for _, t in _ticks(ax.xaxis)] == ["128", "256", "512"]  # L0 is marked as well
    _no_overlap(ax.get_yticklabels() + [ax.yaxis.label], fig.canvas.get_renderer())
    _inside_figure(fig, ax.title)


def test_study_line_figure_with_no_successful_run():
    lengths = [256]
    t = _table({0.0: [None], 0.3: [None]}, lengths)
    fig = _draw(line_figure(_cfg(lengths), t, lengths, "perplexity"))
    assert fig.axes[0].get_legend() is None
    assert any(x.get_text() == "no successful run" for x in fig.axes[0].texts)


def test_study_babilong_single_length():
    cfg = _cfg([256], babilong={"lengths": ["1k"], "depths": [0, 50, 100]})
    recs = {"pi_a0_s0": {"status": "ok", "results": {"babilong_longshort": {"acc_1k_d0": 1.0, "acc_1k_d50": 0.5,
                                                                         "acc_1k_d100": 0.0}}},
            "pi_a0.3_s0": {"status": "failed"}}
    fig = _draw(babilong_figure(cfg, recs))
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(panels) == 2
    for ax in panels:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1k"]
        assert [t.get_text() for t in ax.get_yticklabels()] == ["0%", "50%", "100%"]
        assert ax.get_window_extent(fig.canvas.get_renderer()).width / fig.dpi >= 1.0
        _inside_figure(fig, ax.title)
    assert [t.get_text() for t in panels[0].texts] == ["1.00", "0.50", "0.00"]
    assert [t.get_text() for t in panels[1].texts] == ["—", "—", "—"]


def test_per_position_curve_no_offset():
    curves = {"run": {256: [5.000001 + 1e-6 * (i % 3) for i in range(256)]}}
    fig = _draw(curves_figure(curves))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    _check_plain_value_axis(ax.yaxis, min_ticks=2)
