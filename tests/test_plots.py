"""Every report plot rendered on edge-case data, checked through matplotlib's own objects (scales, tick texts,
offset text, legend entries, title and axes extents, where each line's markers land), not file sizes: near-equal
values, values spanning decades, one seed, coinciding lines, one-row and one-column heatmaps, quick runs."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from torchtune_longshort.eval.report.figures import curves_figure
from torchtune_longshort.eval.tasks.passkey.task import DIGITS_CHANCE
from torchtune_longshort.eval.plot_axes import MIN_SPAN_FRACTION, QUICK_MARK, WIDENED_GID, value_limits
from torchtune_longshort.eval.report.figures import heatmap_figure, ppl_figure
from torchtune_longshort.study.claim_figures import DIRECTION_STYLE, divergence_figure, e_range_figure, scatter_figure
from torchtune_longshort.study.figures import babilong_figure, line_figure, passkey_figure
from torchtune_longshort.synthetic.experiments import paper_figure, replot_figures
from torchtune_longshort.synthetic.sparsity_probes.figures import probe_figure


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
    boxes = [(t.get_text(), t.get_window_extent(renderer)) for t in labels if t.get_text() and t.get_visible()]
    for i, (ta, a) in enumerate(boxes):
        for tb, b in boxes[i + 1:]:
            assert not a.overlaps(b), (ta, tb, a, b)


def _texts(fig):
    """Every text a reader sees on ``fig``: suptitle, figure texts, axes titles, axis labels and in-axes texts."""
    out = [fig.get_suptitle()] + [t.get_text() for t in fig.texts]
    for ax in fig.axes:
        out += [ax.get_title(), ax.get_xlabel(), ax.get_ylabel()] + [t.get_text() for t in ax.texts]
    return [t for t in out if t]


def _series(ax):
    """(legend label, the Line2D drawn for it) of every legend entry of ``ax`` (an errorbar's data line for an
    errorbar entry)."""
    handles, labels = ax.get_legend_handles_labels()
    return [(lab, h.lines[0] if hasattr(h, "lines") else h) for h, lab in zip(handles, labels)]


def _marker_points(line):
    """Display coordinates of the markers ``line`` draws (its ``markevery`` applied)."""
    pts = line.get_transform().transform(_xy(line))
    every = line.get_markevery()
    if every is None:
        return pts
    start, step = every if isinstance(every, tuple) else (0, every)
    return pts[start::step]


def _xy(line):
    return np.column_stack([np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)])


def _same_data(a, b):
    return _xy(a).shape == _xy(b).shape and np.allclose(_xy(a), _xy(b))


def _check_every_series_visible(ax, fig):
    """Every legend entry's line is on the axes, and no line disappears under the others: it differs in line style
    or marker from every line with the same data, and some of its markers are not covered by a marker drawn over
    it (a later line's marker at least as large, within its radius)."""
    series = _series(ax)
    assert series, "no legend entries"
    drawn = ax.get_lines()
    px = fig.dpi / 72
    for i, (lab, line) in enumerate(series):
        assert line in drawn and line.get_visible(), lab
        assert line.get_marker() not in (None, "None", "", " "), f"{lab}: no marker"
        order = drawn.index(line)
        for lab2, other in series[:i] + series[i + 1:]:
            if _same_data(other, line):
                style = (line.get_linestyle(), line.get_marker())
                assert (other.get_linestyle(), other.get_marker()) != style, (lab, lab2)
        over = [o for _, o in series if o is not line and (o.get_zorder(), drawn.index(o)) > (line.get_zorder(), order)]
        mine = _marker_points(line)
        r = line.get_markersize() * px / 2

        def covered(p):
            return any(o.get_markersize() >= line.get_markersize()
                       and (np.hypot(*(_marker_points(o) - p).T) < r).any() for o in over)

        assert not all(covered(p) for p in mine), f"{lab}: every marker is covered by a later line's"


def _inside_figure(fig, artist):
    r = fig.canvas.get_renderer()
    box, page = artist.get_window_extent(r), fig.bbox
    inside = box.x0 >= page.x0 - 1 and box.x1 <= page.x1 + 1 and box.y0 >= page.y0 - 1 and box.y1 <= page.y1 + 1
    assert inside, (box, page)


def test_ppl_near_equal_values_linear_with_plain_ticks():
    runs = {"a": {"longshort_ppl": {"ppl_128": 110.072, "ppl_256": 110.0745, "ppl_1k": 110.079}},
            "b": {"longshort_ppl": {"ppl_128": 110.0731, "ppl_256": 110.0752}}}
    fig = _draw(ppl_figure(runs))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    _check_plain_value_axis(ax.yaxis)
    assert [t for _, t in _ticks(ax.xaxis)] == ["128", "256", "1k"]
    assert ax.get_xlabel() == "sequence length (tokens)" and ax.get_ylabel() == "perplexity"
    _no_overlap(ax.get_yticklabels(), fig.canvas.get_renderer())


def test_ppl_over_decades_log_with_plain_ticks():
    runs = {"a": {"longshort_ppl": {"ppl_128": 9.5, "ppl_512": 80.0, "ppl_2k": 2500.0}}}
    fig = _draw(ppl_figure(runs))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    _check_plain_value_axis(ax.yaxis)
    assert {"10", "100", "1000"} <= {t for _, t in _ticks(ax.yaxis)}
    assert [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()] == []


def test_ppl_single_length():
    fig = _draw(ppl_figure({"a": {"longshort_ppl": {"ppl_256": 12.0}}}))
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


def _study(L=256, alphas=(0.0, 0.3), seeds=(0,), quick=False, finetune=None, **eval_fields):
    """A study config (the typed one the figures read) with the fields these figures use."""
    from torchtune_longshort.study.config import StudyConfig

    return StudyConfig.from_mapping({
        "name": "plots", "recipe_config": "configs/tiny/longshort_stdlib.yaml", "L0": 128, "L": L,
        "base": {"pretrain": {"max_steps": 1}}, "model": {"_component_": "torchtune.models.llama2.llama2"},
        "finetune": finetune or {"max_steps": 1}, "methods": {"pi": {"method": "linear"}}, "alphas": list(alphas),
        "seeds": list(seeds), "quick": quick, "eval": eval_fields})


def _cfg(lengths, **fields):
    eval_fields = {k: fields.pop(k) for k in list(fields) if k not in ("alphas", "seeds", "quick")}
    return _study(misalignment_lengths=lengths, ppl_lengths=lengths, **eval_fields, **fields)


def _table(values_by_alpha, lengths):
    from torchtune_longshort.eval.tasks.common.lengths import length_label

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
    lo, hi = ax.get_ylim()  # a 0.01 % spread is not blown up to the whole axis
    assert hi - lo >= MIN_SPAN_FRACTION * 12.19433 * 0.999 and lo <= 12.19268 and hi >= 12.19433
    assert any(x.get_gid() == WIDENED_GID for x in ax.texts)
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
    recs = {"pi_a0_s0": {"status": "ok", "results": {"longshort_babilong": {"acc_1k_d0": 1.0, "acc_1k_d50": 0.5,
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


# ------------------------------------------------------------------------------- the value-axis rule (issue 25)
@pytest.mark.parametrize("values, widened", [([408.1, 412.6, 414.3], True), ([110.072, 110.079], True),
                                             ([35.0, 96.0], False), ([0.0, 0.0], False), ([-0.5, 0.4], False),
                                             ([0.001, 0.0011], True), ([-12.2, -12.19], True)])
def test_value_limits_rule(values, widened):
    lim = value_limits(values)
    assert (lim is not None) == widened
    if lim:
        lo, hi = lim
        assert lo <= min(values) and hi >= max(values)
        assert hi - lo == pytest.approx(MIN_SPAN_FRACTION * max(abs(v) for v in values))
        assert lo >= 0 or min(values) < 0  # positive values never get a negative axis


def test_ppl_near_equal_values_get_a_floor_and_a_note():
    # The quick study's perplexities: 414.3 / 412.6 / 408.1, which a tight axis drew as a steep fall.
    runs = {"CE": {"longshort_ppl": {"ppl_128": 414.3, "ppl_256": 412.6, "ppl_512": 408.1}},
            "CE + 0.3": {"longshort_ppl": {"ppl_128": 414.3, "ppl_256": 412.8, "ppl_512": 408.1}},
            "CE again": {"longshort_ppl": {"ppl_128": 414.3, "ppl_256": 412.6, "ppl_512": 408.1}}}
    fig = _draw(ppl_figure(runs))
    ax = fig.axes[0]
    _check_every_series_visible(ax, fig)  # "CE again" draws exactly over "CE"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(runs)
    lo, hi = ax.get_ylim()
    assert hi - lo >= MIN_SPAN_FRACTION * 414.3 * 0.999
    assert (414.3 - 408.1) / (hi - lo) < 0.1  # the 6-point spread fills a small band, not the axis
    _check_plain_value_axis(ax.yaxis)
    note = [x for x in ax.texts if x.get_gid() == WIDENED_GID]
    assert len(note) == 1 and "1.5%" in note[0].get_text()
    _inside_figure(fig, note[0])


# ------------------------------------------------------------------------- the claims' bars: e range, divergence
def _cmp(mean, lo, hi, direction, **extra):
    return {"mean": mean, "lo": lo, "hi": hi, "direction": direction, "family": "ppl", "length": 512, **extra}


def _study_cfg(seeds=(0, 1, 2), quick=False, **eval_fields):
    return _study(L=512, alphas=(0.0, 0.1), seeds=seeds, quick=quick,
                  finetune={"max_steps": 1, "overrides": {"e_range": [1, "L/2"]}},
                  ppl_lengths=[128, 512], passkey_lengths=[128, 512], misalignment_lengths=[512], **eval_fields)


def test_e_range_bars_colour_only_intervals_that_exclude_zero():
    comps = [_cmp(-1.8, -3.6, 0.1, "no difference", e_range=[1, "L"]),  # negative mean, interval holds 0
             _cmp(-1.9, -3.1, -0.7, "better", e_range=[1, "L"], length=1024),
             _cmp(0.8, 0.01, 1.6, "worse", e_range=[1, "L/4"], length=2048),
             _cmp(0.2, None, None, "unknown", e_range=["L/4", "L/2"])]
    fig = _draw(e_range_figure(_study_cfg(), {"comparisons": comps}))
    ax = fig.axes[0]
    colours = [tuple(p.get_facecolor()) for p in ax.patches]
    from matplotlib.colors import to_rgba

    assert colours == [to_rgba(DIRECTION_STYLE[c["direction"]][0]) for c in comps]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["e ~ U[1, L] @ 512", "e ~ U[1, L] @ 1k",
                                                           "e ~ U[1, L/4] @ 2k", "e ~ U[L/4, L/2] @ 512"]
    assert not any("'" in t for t in _texts(fig) + [t.get_text() for t in ax.get_yticklabels()])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [DIRECTION_STYLE[d][1] for d in ("better", "worse", "no difference", "unknown")]
    assert "includes 0" in legend[2] and "excludes 0" in legend[0]
    assert "(ppl)" in ax.get_xlabel() and "U[1, L/2]" in fig.get_suptitle() and "3 seeds" in fig.get_suptitle()
    _check_plain_value_axis(ax.xaxis)
    lo, hi = ax.get_xlim()
    assert lo <= -3.6 and hi >= 1.6  # every interval inside the axes
    _no_overlap(ax.get_yticklabels(), fig.canvas.get_renderer())
    _inside_figure(fig, fig.legends[0])


def test_divergence_bars_one_panel_per_unit():
    comps = []
    for d, ppl, ent in (("sce", (11.1, 9.2, 13.0, "worse"), (-0.7, -0.96, -0.45, "lower")),
                        ("js", (-0.02, -0.2, 0.15, "no difference"), (0.0003, -0.01, 0.011, "no difference"))):
        comps += [_cmp(*ppl, divergence=d, alpha=0.3, length=2048),
                  {**_cmp(*ent, divergence=d, alpha=0.3), "family": "entropy"}]
    fig = _draw(divergence_figure(_study_cfg(seeds=[0]), {"comparisons": comps}))
    panels = fig.axes
    assert len(panels) == 2
    assert "(ppl)" in panels[0].get_xlabel() and "nats" not in panels[0].get_xlabel()
    assert "(nats)" in panels[1].get_xlabel() and "entropy" in panels[1].get_xlabel()
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["sce a=0.3 @ 2k", "js a=0.3 @ 2k"]
    assert [t.get_text() for t in panels[1].get_yticklabels()] == ["sce a=0.3 @ 512", "js a=0.3 @ 512"]
    hi_entropy = max(abs(x) for x in panels[1].get_xlim())
    assert hi_entropy < 2  # the 11-ppl bar does not set the entropy axis
    assert "1 seed" in fig.get_suptitle() and "±" not in fig.get_suptitle()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [DIRECTION_STYLE[d][1] for d in ("worse", "lower", "no difference")]
    for ax in panels:  # every comparison is drawn: a bar and a mean marker, even a bar of 0.0003
        assert len(ax.patches) == 2
        _check_plain_value_axis(ax.xaxis)


# ------------------------------------------------------------------------------------ passkey chance, one seed
def test_passkey_heatmap_marks_chance_level():
    cfg = _study_cfg(seeds=[0], metadata={"passkey_depths": [0, 50]})
    recs = {"pi_a0_s0": {"status": "ok", "results": {"longshort_passkey": {
                "digits_128_d0": 0.05, "digits_128_d50": 0.9, "digits_512_d0": 0.1, "digits_512_d50": 0.0}}},
            "pi_a0.1_s0": {"status": "failed"}}
    fig = _draw(passkey_figure(cfg, recs))
    cbar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    marks = [ln for ln in cbar.get_lines() if np.allclose(ln.get_ydata(), DIGITS_CHANCE)]
    assert len(marks) == 1 and marks[0].get_visible()
    assert f"chance {DIGITS_CHANCE:g}" in cbar.get_ylabel()
    title = fig.get_suptitle().replace("\n", " ")
    assert f"chance level (random digits) {DIGITS_CHANCE:g}" in title and "1 seed" in title and "±" not in title
    panels = [ax for ax in fig.axes if ax is not cbar]
    assert [t.get_text() for t in panels[0].texts] == ["0.05", "0.10", "0.90", "0.00"]
    _inside_figure(fig, fig._suptitle)


def test_passkey_chance_is_the_digit_score_of_random_guesses():
    import random

    from torchtune_longshort.eval.tasks.passkey.task import digit_accuracy

    rng = random.Random(0)
    keys = ["".join(rng.choice("0123456789") for _ in range(5)) for _ in range(4000)]
    guesses = ["".join(rng.choice("0123456789") for _ in range(5)) for _ in keys]
    assert np.mean([digit_accuracy(g, k) for g, k in zip(guesses, keys)]) == pytest.approx(DIGITS_CHANCE, abs=0.01)


@pytest.mark.parametrize("seeds, title", [([0], "pi: 1 seed"), ([0, 1, 2], "pi: mean ± sd over 3 seeds")])
def test_line_figure_title_names_the_seed_count(seeds, title):
    lengths = [256, 512]
    cfg = _cfg(lengths, seeds=seeds)
    fig = _draw(line_figure(cfg, _table({0.0: [40.0, 60.0], 0.3: [41.0, 62.0]}, lengths), lengths, "perplexity"))
    assert fig.axes[0].get_title() == title


# -------------------------------------------------------------------------------------- scatter: readable ticks
@pytest.mark.parametrize("mis, ppl", [
    ([14.926008, 14.926189, 14.926241, 14.926198, 14.926236], [2572.5, 2560.1, 2561.0, 2560.9, 2560.9]),  # quick
    ([3.5, 4.1, 5.2, 6.9, 7.6], [48.0, 52.5, 70.1, 86.2, 113.0])])
def test_scatter_ticks_do_not_overlap(mis, ppl):
    cfg = _study_cfg(seeds=[0], quick=True)
    recs = {f"pi_a{i}_s0": {"status": "ok", "method": "pi", "results": {
                "longshort_ppl": {"ppl_512": p}, "longshort_misalignment": {"sce_512": m}},
                "train": {"mean_last_10": {"ce": 7.78 + 0.01 * i}}} for i, (m, p) in enumerate(zip(mis, ppl))}
    table1 = {"correlations": [{"predictor": "misalignment (Eq. 4) at 512", "target": "ppl at 512", "spearman": -0.3}]}
    fig = _draw(scatter_figure(table1, cfg, recs))
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            _check_plain_value_axis(axis)
            assert max(len(t) for _, t in _ticks(axis)) <= 6, _ticks(axis)
        _no_overlap(ax.get_xticklabels(), r)
        _no_overlap(ax.get_yticklabels(), r)
        _no_overlap(ax.get_xticklabels() + [ax.xaxis.label] + [t for t in ax.texts], r)
        assert [lab for lab, _ in _series(ax)] == ["pi"]
        assert len(ax.collections[0].get_offsets()) == len(mis)
    assert QUICK_MARK in fig.get_suptitle()


# ------------------------------------------------------------------------ every series visible, quick marks
def _coinciding(labels, n_points, seeds=2):
    """Synthetic-figure data where every curve has exactly the same values (NoPE, ALiBi, RoPE on the length task)."""
    y = np.geomspace(1e-3, 2e3, n_points)
    return {lab: {"lengths": list(range(1, n_points + 1)), "l_train": 10, "mse": [y] * seeds} for lab in labels}


@pytest.mark.parametrize("name, labels, n_points", [("1b", ["NoPE", "learned abs.", "ALiBi", "RoPE"], 50),
                                                    ("1c", [f"f = {f}" for f in "abcdef"], 50),
                                                    ("4", ["l_train = 6", "l_train = 10"], 16)])
def test_synthetic_coinciding_curves_all_visible(name, labels, n_points):
    fig = _draw(paper_figure(name, _coinciding(labels, n_points)))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == labels
    _check_every_series_visible(ax, fig)
    assert not any(QUICK_MARK in t for t in _texts(fig))


def test_study_coinciding_lines_all_visible():
    lengths = [128, 256, 512]
    t = _table({0.0: [414.3, 412.6, 408.1], 0.1: [414.3, 412.6, 408.1], 0.3: [414.3, 412.6, 408.1]}, lengths)
    fig = _draw(line_figure(_cfg(lengths, alphas=[0.0, 0.1, 0.3]), t, lengths, "perplexity"))
    _check_every_series_visible(fig.axes[0], fig)


def test_quick_figures_say_so(tmp_path):
    lengths = [256, 512]
    t = _table({0.0: [40.0, 60.0]}, lengths)
    study = _draw(line_figure(_cfg(lengths, quick=True), t, lengths, "perplexity"))
    assert study.get_suptitle() == QUICK_MARK and "quick (smoke) run" in QUICK_MARK
    _inside_figure(study, study._suptitle)
    assert not _draw(line_figure(_cfg(lengths), t, lengths, "perplexity")).get_suptitle()
    syn = _draw(paper_figure("4", _coinciding(["l_train = 6", "l_train = 10"], 16), quick=True))
    assert QUICK_MARK in syn.get_suptitle()
    _inside_figure(syn, syn._suptitle)
    table = {f"K_train={k}": {"l_train": 6, "k_train": k, "acc_mean": {"1,3": 1.0, "1,6": 0.9, "1,12": 0.6}}
             for k in (1, 2)}  # the quick parity figure: two panels
    probe = _draw(probe_figure("parity", table, quick=True))
    assert QUICK_MARK in probe.get_suptitle()
    _inside_figure(probe, probe._suptitle)


def test_synthetic_replot_from_csv(tmp_path):
    base = {"task": "length", "l_train": 6, "l_test": 16}
    (tmp_path / "summary.json").write_text(json.dumps({"meta": {"base_config": base, "quick": True}}))
    rows = ["figure,curve,seed,length,test_mse"]
    rows += [f"4,l_train = {lt},{s},{n},{0.01 * n * n}" for lt in (6, 10) for s in (0, 1) for n in range(1, 17)]
    (tmp_path / "fig4.csv").write_text("\n".join(rows) + "\n")
    written = replot_figures(["4"], str(tmp_path))
    assert written == [str(tmp_path / "fig4.png")] and (tmp_path / "fig4.png").stat().st_size > 0
    with pytest.raises(ValueError, match="fig1b.csv"):
        replot_figures(["1b"], str(tmp_path))
