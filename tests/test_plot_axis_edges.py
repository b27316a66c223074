"""The reports' axes at their edges, second round: value axes end on a labelled tick at or beyond the data, position
axes label their first and last position, the 'axis widened' note lies outside the axes, one name for the length
axis, and a per-position curve's NaN said. References: the data's own extremes, matplotlib's drawn tick labels and
window extents, the curve's own NaN count."""

from __future__ import annotations

import math

import numpy as np
import pytest
from plot_helpers import claims_cfg, draw, inside_figure, lengths_cfg, no_overlap, study, ticks

from torchtune_longshort.plots.axes import MISSING_GID, WIDENED_GID


def _number(text: str) -> float:
    return float(text.replace("−", "-"))


def _check_ends_on_ticks(axis, values):
    """The first drawn tick label is at or below the data, the last at or beyond it, and the axis ends there (past
    it by a margin, a marker's room, never by a step: no unlabelled stretch)."""
    got = ticks(axis)
    lo, hi = sorted(axis.get_view_interval())
    first, last = _number(got[0][1]), _number(got[-1][1])
    assert first <= min(values) and last >= max(values), (got, min(values), max(values))
    log = axis.get_scale() == "log"
    span = math.log(last / first) if log else last - first
    beyond = (math.log(hi / last), math.log(first / lo)) if log else (hi - last, first - lo)
    assert max(beyond) <= 0.05 * span, (got, lo, hi)


def _scatter_recs(points):
    return {f"{m}_a0_s{s}": {"status": "ok", "method": m, "results": {
                "longshort_ppl": {"ppl_512": p}, "longshort_misalignment": {"sce_512": x}},
                "train": {"mean_last_10": {"ce": ce}}}
            for m, pts in points.items() for s, (x, p, ce) in enumerate(pts)}


def test_value_axes_end_on_a_labelled_tick_at_or_beyond_the_data():
    # docs/study/gpu_smollm2_seeds/metric_vs_performance.png: perplexities 4.3 .. 10.2 under a top label of 9.0
    from torchtune_longshort.study.claim_figures import base_figure, scatter_figure

    ppl = {"pi": [10.18, 10.12, 9.51, 9.56, 10.15, 9.52], "yarn": [4.27, 4.45, 4.28, 4.46, 4.27, 4.45]}
    mis = {"pi": [2.47, 2.49, 3.1, 3.16, 2.48, 3.17], "yarn": [1.87, 1.45, 1.88, 1.46, 1.87, 1.45]}
    pts = {m: [(x, p, 2.3 - 0.2 * (m == "yarn") + 0.01 * i) for i, (x, p) in enumerate(zip(mis[m], ppl[m]))]
           for m in ppl}
    cfg = claims_cfg(seeds=range(6), alphas=(0.0,), methods={"pi": {"method": "linear"}, "yarn": {"method": "yarn"}})
    fig = draw(scatter_figure({"correlations": []}, cfg, _scatter_recs(pts)))
    for ax in fig.axes:
        _check_ends_on_ticks(ax.yaxis, ppl["pi"] + ppl["yarn"])
    _check_ends_on_ticks(fig.axes[0].xaxis, mis["pi"] + mis["yarn"])
    # the base's perplexity (4.5 at 8k, 15.4 at 16k: top label 14) and a log axis (15 .. 400: labels 20 .. 200)
    cfg = claims_cfg(ppl_lengths=[128, 512])
    for vals in ([4.51, 15.42], [15.0, 400.0]):
        base = {"status": "ok", "results": {"longshort_ppl": {"ppl_128": vals[0], "ppl_512": vals[1]}}}
        ax = draw(base_figure(cfg, base)).axes[0]
        assert ax.get_yscale() == ("log" if vals[1] / vals[0] > 10 else "linear")
        _check_ends_on_ticks(ax.yaxis, vals)


def test_position_axes_label_their_first_and_last_position():
    # longshort-eval-report's per_position_loss.png: 0 .. 1000 of positions 0 .. 1023; docs/study/gpu_smollm2_seeds'
    # base_failure.png: a log2 axis from 1 where its first point is 0.5, to 16k past the last position
    from torchtune_longshort.eval.report.figures import curves_figure
    from torchtune_longshort.study.claim_figures import base_figure

    fig = draw(curves_figure({"ours": {256: [2.0] * 256, 1024: [2.0 + i / 1024 for i in range(1024)]}}))
    got = ticks(fig.axes[0].xaxis)
    assert (got[0][1], got[-1][1]) == ("0", "1023"), got
    no_overlap(fig.axes[0].get_xticklabels(), fig.canvas.get_renderer())

    cfg = claims_cfg(ppl_lengths=[8192, 16384])
    base = {"status": "ok", "results": {"longshort_ppl": {"ppl_8k": 4.5, "ppl_16k": 15.4}},
            "curves": {str(n): [4.0 + i / n for i in range(n)] for n in (8192, 16384)}}
    fig = draw(base_figure(cfg, base))
    ax = fig.axes[1]
    first_point = min(float(np.min(ln.get_xdata())) for ln in ax.get_lines() if len(ln.get_xdata()) > 2)
    got = ticks(ax.xaxis)
    assert got[0][0] == first_point and _number(got[0][1]) == first_point, got
    assert got[-1] == (16383, "16383"), got
    no_overlap([t for t in ax.get_xticklabels() if t.get_text()], fig.canvas.get_renderer())


def test_widened_note_lies_outside_the_axes_under_the_x_label():
    # 'y axis widened: ...' sat in the axes' bottom-left corner, on pi's point there (scatter, 6 methods, 3 failed)
    from torchtune_longshort.study.claim_figures import scatter_figure

    ms = ["pi", "yarn", "clex", "ntk", "longrope", "dyn"]
    cfg = claims_cfg(seeds=range(4), alphas=(0.0,), methods={m: {"method": "linear"} for m in ms})
    recs = _scatter_recs({m: [(1.0 + i + j / 10, 50 + i * 3 + j, 2 + j / 10) for j in range(4)]
                          for i, m in enumerate(ms)})
    for j in range(3):
        recs[f"pi_a0_s{j}"] = {"status": "failed", "stage": f"train{j}"}
    fig = draw(scatter_figure({"correlations": []}, cfg, recs))
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        note = next(t for t in ax.texts if t.get_gid() == WIDENED_GID)
        box = note.get_window_extent(r)
        assert not box.overlaps(ax.get_window_extent(r)), "the widened note lies in the axes, where the points are"
        others = [ax.xaxis.label, ax.get_legend()] + [t for t in ax.texts if t.get_gid() == MISSING_GID] + [
            t for t in ax.xaxis.get_ticklabels() if t.get_visible() and t.get_text()]
        assert not [o for o in others if box.overlaps(o.get_window_extent(r))]
        inside_figure(fig, note)


def test_heatmaps_name_the_length_axis_as_the_line_plots_do():
    # the heatmaps said "context length" (eval) and "length" (study), the line plots "sequence length (tokens)"
    from torchtune_longshort.eval.report.figures import heatmap_figure, ppl_figure
    from torchtune_longshort.study.figures import babilong_figure

    line = draw(ppl_figure({"r": {"longshort_ppl": {"ppl_128": 30.0, "ppl_256": 35.0}}})).axes[0].get_xlabel()
    heat = draw(heatmap_figure({(128, "128"): {0: 1.0, 50: 0.5}}, "passkey")).axes[0].get_xlabel()
    cfg = study(babilong={"lengths": ["1k"], "depths": [0, 50], "n": 1, "qa": "qa1"})
    recs = {r.key: {"status": "ok", "results": {"longshort_babilong_qa1": {"acc_1k_d0": 1.0, "acc_1k_d50": 0.0}}}
            for r in cfg.grid}
    panels = [ax for ax in draw(babilong_figure(cfg, recs)).axes if ax.get_label() != "<colorbar>"]
    assert heat == line and {ax.get_xlabel() for ax in panels} - {""} == {line}


@pytest.mark.parametrize("where", ["eval", "study", "base"])
def test_a_nan_in_a_per_position_curve_is_said(where):
    # a NaN position made a gap in the curve (its bucket's mean NaN), and no word said so
    curve = [3.0 + i / 256 for i in range(256)]
    curve[40] = curve[41] = float("nan")
    bad = sum(math.isnan(v) for v in curve)
    if where == "eval":
        from torchtune_longshort.eval.report.figures import curves_figure

        ax = draw(curves_figure({"ours": {256: curve}})).axes[0]
    elif where == "study":
        from torchtune_longshort.study.figures import curve_figure

        cfg = lengths_cfg([256], alphas=[0.0], seeds=[0])
        ax = draw(curve_figure(cfg, {"pi_a0_s0": {"status": "ok", "curves": {"256": curve}}}, "256")).axes[0]
    else:
        from torchtune_longshort.study.claim_figures import base_figure

        base = {"status": "ok", "results": {"longshort_ppl": {"ppl_128": 20.0, "ppl_256": 30.0}},
                "curves": {"256": curve}}
        ax = draw(base_figure(lengths_cfg([128, 256]), base)).axes[1]
    legends = ([ax.get_legend()] if ax.get_legend() else []) + ax.figure.legends  # long labels: under the axes
    entries = [t.get_text() for lg in legends for t in lg.get_texts()]
    assert any(f"{bad} of {len(curve)} positions without a finite loss" in e for e in entries), entries
