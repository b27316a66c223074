"""The study report's claims figures (paired-difference bars, Table 1's scatter, perplexity against alpha), rendered
from small comparisons and records: bar colours by interval, one axis per unit, readable ticks, each method's own
Spearman rho beside the pooled one (checked against scipy), and panels that say why they are empty."""

from __future__ import annotations

import math

import pytest
from matplotlib.colors import to_rgba
from plot_helpers import (check_legend_under, check_plain_value_axis, claims_cfg, draw, drawn_ticklabels, inside_figure,
                          no_overlap, series, texts, ticks)
from scipy.stats import spearmanr

from torchtune_longshort.plots.axes import MISSING_GID, QUICK_MARK, WIDENED_GID
from torchtune_longshort.study.claim_figures import (DIRECTION_STYLE, alpha_figure, divergence_figure,
                                                     e_range_figure, scatter_figure)


def _cmp(mean, lo, hi, direction, **extra):
    return {"mean": mean, "lo": lo, "hi": hi, "direction": direction, "family": "ppl", "length": 512, **extra}


def test_e_range_bars_colour_only_intervals_that_exclude_zero():
    comps = [_cmp(-1.8, -3.6, 0.1, "no difference", e_range=[1, "L"]),  # negative mean, interval holds 0
             _cmp(-1.9, -3.1, -0.7, "better", e_range=[1, "L"], length=1024),
             _cmp(0.8, 0.01, 1.6, "worse", e_range=[1, "L/4"], length=2048),
             _cmp(0.2, None, None, "unknown", e_range=["L/4", "L/2"])]
    fig = draw(e_range_figure(claims_cfg(), {"comparisons": comps, "main_e_range": [1, "L/2"]}))
    ax = fig.axes[0]
    colours = [tuple(p.get_facecolor()) for p in ax.patches]
    assert colours == [to_rgba(DIRECTION_STYLE[c["direction"]][0]) for c in comps]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["e ~ U[1, L] @ 512: -1.8", "e ~ U[1, L] @ 1k: -1.9",
                                                           "e ~ U[1, L/4] @ 2k: +0.8", "e ~ U[L/4, L/2] @ 512: +0.2"]
    # a verdict's colour on its label too, black where the interval holds 0 or there is none
    assert [t.get_color() for t in ax.get_yticklabels()][1:3] == ["tab:green", "tab:red"]
    assert not any("'" in t for t in texts(fig) + [t.get_text() for t in ax.get_yticklabels()])
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [DIRECTION_STYLE[d][1] for d in ("better", "worse", "no difference", "unknown")]
    assert "includes 0" in legend[2] and "excludes 0" in legend[0]
    assert "(ppl)" in ax.get_xlabel() and "U[1, L/2]" in fig.get_suptitle() and "3 seeds" in fig.get_suptitle()
    check_plain_value_axis(ax.xaxis)
    lo, hi = ax.get_xlim()
    assert lo <= -3.6 and hi >= 1.6  # every interval inside the axes
    no_overlap(ax.get_yticklabels(), fig.canvas.get_renderer())
    inside_figure(fig, fig.legends[0])


def test_bars_count_the_seeds_they_pair_and_a_short_significant_bar_keeps_its_number():
    # the title said "mean over 3 seeds" (the config's) over bars of 1, 2 and 3 seeds, and a significant bar
    # beside a +-40 interval was a dot at 0 whose red no one could see (an audit)
    comps = [_cmp(0.5, None, None, "unknown", e_range=[1, "L/4"], n=1),
             _cmp(-3.0, -40.0, 34.0, "no difference", e_range=[1, "L"], n=2),
             _cmp(0.0004, 0.0001, 0.0007, "worse", e_range=[1, "L/8"], n=3)]
    fig = draw(e_range_figure(claims_cfg(seeds=(0, 1, 2)), {"comparisons": comps, "main_e_range": [1, "L/2"]}))
    labels = fig.axes[0].get_yticklabels()
    assert "means over 1-3 seeds (n per bar)" in fig.get_suptitle() and "over 3 seeds" not in fig.get_suptitle()
    assert [t.get_text() for t in labels] == ["e ~ U[1, L/4] @ 512: +0.5 (n=1)", "e ~ U[1, L] @ 512: -3 (n=2)",
                                              "e ~ U[1, L/8] @ 512: +0.0004 (n=3)"]
    assert labels[2].get_color() == DIRECTION_STYLE["worse"][0]
    inside_figure(fig, fig.legends[0])
    comps = [{**c, "n": 2} for c in comps]  # one count for every bar: said once, in the title
    fig = draw(e_range_figure(claims_cfg(seeds=(0, 1, 2)), {"comparisons": comps, "main_e_range": [1, "L/2"]}))
    assert "mean over 2 seeds" in fig.get_suptitle() and "(n=" not in fig.axes[0].get_yticklabels()[0].get_text()


def test_divergence_bars_one_panel_per_unit():
    comps = []
    for d, ppl, ent in (("sce", (11.1, 9.2, 13.0, "worse"), (-0.7, -0.96, -0.45, "lower")),
                        ("js", (-0.02, -0.2, 0.15, "no difference"), (0.0003, -0.01, 0.011, "no difference"))):
        comps += [_cmp(*ppl, divergence=d, alpha=0.3, length=2048),
                  {**_cmp(*ent, divergence=d, alpha=0.3), "family": "entropy"}]
    fig = draw(divergence_figure(claims_cfg(seeds=[0]), {"comparisons": comps}))
    panels = fig.axes
    assert len(panels) == 2
    assert "(ppl)" in panels[0].get_xlabel() and "nats" not in panels[0].get_xlabel()
    assert "(nats)" in panels[1].get_xlabel() and "entropy" in panels[1].get_xlabel()
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["sce a=0.3 @ 2k: +11.1", "js a=0.3 @ 2k: -0.02"]
    assert [t.get_text() for t in panels[1].get_yticklabels()] == ["sce a=0.3 @ 512: -0.7",
                                                                  "js a=0.3 @ 512: +0.0003"]
    hi_entropy = max(abs(x) for x in panels[1].get_xlim())
    assert hi_entropy < 2  # the 11-ppl bar does not set the entropy axis
    assert "1 seed" in fig.get_suptitle() and "±" not in fig.get_suptitle()
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert legend == [DIRECTION_STYLE[d][1] for d in ("worse", "lower", "no difference")]
    for ax in panels:  # every comparison is drawn: a bar and a mean marker, even a bar of 0.0003
        assert len(ax.patches) == 2
        check_plain_value_axis(ax.xaxis)


def _scatter_recs(points):
    """``{method: [(misalignment at 512, ppl at 512, training CE)]}`` as records of seeds 0.. of alpha 0."""
    return {f"{m}_a0_s{s}": {"status": "ok", "method": m, "results": {
                "longshort_ppl": {"ppl_512": p}, "longshort_misalignment": {"sce_512": x}},
                "train": {"mean_last_10": {"ce": ce}}}
            for m, pts in points.items() for s, (x, p, ce) in enumerate(pts)}


@pytest.mark.parametrize("mis, ppl", [
    ([14.926008, 14.926189, 14.926241, 14.926198, 14.926236], [2572.5, 2560.1, 2561.0, 2560.9, 2560.9]),  # quick
    ([3.5, 4.1, 5.2, 6.9, 7.6], [48.0, 52.5, 70.1, 86.2, 113.0])])
def test_scatter_ticks_do_not_overlap(mis, ppl):
    cfg = claims_cfg(seeds=range(len(mis)), alphas=(0.0,), quick=True)
    recs = _scatter_recs({"pi": [(m, p, 7.78 + 0.01 * i) for i, (m, p) in enumerate(zip(mis, ppl))]})
    table1 = {"correlations": [{"predictor": "misalignment (Eq. 4) at 512", "target": "ppl at 512", "spearman": -0.3}]}
    fig = draw(scatter_figure(table1, cfg, recs))
    r = fig.canvas.get_renderer()
    for ax in fig.axes:
        for axis in (ax.xaxis, ax.yaxis):
            check_plain_value_axis(axis)
            assert max(len(t) for _, t in ticks(axis)) <= 6, ticks(axis)
        no_overlap(ax.get_xticklabels(), r)
        no_overlap(ax.get_yticklabels(), r)
        no_overlap(ax.get_xticklabels() + [ax.xaxis.label] + list(ax.get_legend().get_texts()), r)
        assert [lab.split(":")[0] for lab, _ in series(ax)] == ["pi"]
        assert len(ax.collections[0].get_offsets()) == len(mis)
    assert QUICK_MARK in fig.get_suptitle()


def test_scatter_legend_stays_under_the_x_label_when_notes_shorten_the_axes():
    # six methods and three failed checkpoints (their 'no point' note under the legend) shortened the axes; the legend,
    # anchored at a fixed -0.14 of their height, sat on the x label; the reference: matplotlib's own extents
    methods = ("pi", "yarn", "clex", "ntk", "longrope", "dyn")
    cfg = claims_cfg(seeds=range(4), alphas=(0.0,), methods={m: {"method": "linear"} for m in methods})
    recs = _scatter_recs({m: [(1.0 + i + j / 10, 50 + 3 * i + j, 2 + j / 10) for j in range(4)]
                          for i, m in enumerate(methods)})
    recs.update({f"pi_a0_s{j}": {"status": "failed", "stage": f"train{j}"} for j in range(3)})
    fig = draw(scatter_figure({"correlations": []}, cfg, recs))
    for ax in fig.axes:
        assert len(ax.get_legend().get_texts()) == len(methods)
        check_legend_under(fig, ax)
        inside_figure(fig, next(t for t in ax.texts if t.get_gid() == MISSING_GID))


def test_scatter_gives_each_methods_spearman_beside_the_pooled_one():
    # docs/study/cpu_medium's shape: each method a cluster of its own. Pooled, misalignment and ppl fall together
    # (the clusters' offsets); within each method they rise together. One pooled rho hides that.
    pts = {"pi": [(1.0, 60.0), (1.2, 61.0), (1.4, 63.0), (1.6, 66.0)],
           "yarn": [(3.0, 50.0), (3.2, 51.5), (3.4, 52.0), (3.6, 54.0)],
           "clex": [(5.0, 40.0), (5.1, 43.0), (5.3, 41.0)]}
    cfg = claims_cfg(seeds=range(4), alphas=(0.0,), methods={m: {"method": m2} for m, m2 in
                                                             (("pi", "linear"), ("yarn", "yarn"), ("clex", "clex"))})
    recs = _scatter_recs({m: [(x, p, 2.0 + x / 10) for x, p in v] for m, v in pts.items()})
    pooled = spearmanr([x for v in pts.values() for x, _ in v], [p for v in pts.values() for _, p in v])[0]
    table1 = {"correlations": [{"predictor": "misalignment (Eq. 4) at 512", "target": "ppl at 512",
                                "spearman": pooled}]}
    fig = draw(scatter_figure(table1, cfg, recs))
    ax = fig.axes[0]
    assert f"pooled Spearman {pooled:.2f}, 11 checkpoints" in ax.get_title() and pooled < -0.5
    labels = [t.get_text() for t in ax.get_legend().get_texts()]
    want = [f"{m}: Spearman {spearmanr(*zip(*v))[0]:+.2f}, n={len(v)}" for m, v in pts.items()]
    assert labels == want and all("+" in w for w in want[:2])  # within-method rho of the other sign
    legend_box = ax.get_legend().get_window_extent(fig.canvas.get_renderer())
    assert not legend_box.overlaps(ax.get_window_extent(fig.canvas.get_renderer()))  # covers no point


def test_scatter_marks_the_checkpoints_that_make_one_dot():
    # two seeds that trained alike drew one dot for two checkpoints, under a title counting both (a walk)
    cfg = claims_cfg(seeds=range(3), alphas=(0.0,), methods={"pi": {"method": "linear"}, "yarn": {"method": "yarn"}})
    recs = _scatter_recs({"pi": [(2.0, 40.0, 2.0), (2.0, 40.0, 2.5), (6.0, 90.0, 3.0)],
                          "yarn": [(4.0, 60.0, 2.2), (2.01, 40.2, 2.5), (5.0, 70.0, 3.5)]})
    table1 = {"correlations": [{"predictor": "misalignment (Eq. 4) at 512", "target": "ppl at 512", "spearman": 0.9}]}
    fig = draw(scatter_figure(table1, cfg, recs))
    mis, ce = fig.axes
    assert mis.get_title().endswith("6 checkpoints (×k: k of them on one dot)"), mis.get_title()
    # one mark, in pi's colour, at pi's two points; yarn's point beside them has its own marker shape and colour
    marks = [(t.get_text(), t.xy, t.get_color()) for t in mis.texts if t.get_text().startswith("×")]
    assert marks == [("×2", (2.0, 40.0), "C0")], marks
    assert ce.get_title().endswith("6 checkpoints") and not [t for t in ce.texts if t.get_text().startswith("×")]
    for ax in fig.axes:  # open markers: a later method's marker on an earlier one's point leaves it showing
        assert all(len(c.get_facecolors()) == 0 or c.get_facecolors()[:, 3].max() == 0 for c in ax.collections)
        inside_figure(fig, ax.title)
    recs["pi_a0_s1"]["results"]["longshort_misalignment"]["sce_512"] = 2.1  # 2.5% of the span apart: two dots
    assert draw(scatter_figure(table1, cfg, recs)).axes[0].get_title().endswith("6 checkpoints")


def test_scatter_says_why_a_method_has_no_rho():
    # six checkpoints at one misalignment value: the legend said "no rho (n < 3)" (an audit)
    cfg = claims_cfg(seeds=range(6), alphas=(0.0,), methods={"pi": {"method": "linear"}, "yarn": {"method": "yarn"}})
    recs = _scatter_recs({"pi": [(7.5, 40.0 + i, 2.0) for i in range(6)],
                          "yarn": [(3.0 + i, 50.0 + i, 2.0) for i in range(2)]})
    table1 = {"correlations": [{"predictor": "misalignment (Eq. 4) at 512", "target": "ppl at 512", "spearman": 0.1}]}
    labels = [t.get_text() for t in draw(scatter_figure(table1, cfg, recs)).axes[0].get_legend().get_texts()]
    assert labels == ["pi: n=6, no rho (misalignment constant)", "yarn: n=2, no rho (n < 3)"]


def test_scatter_of_one_checkpoint_says_one():
    # one checkpoint: the title read "1 checkpoints" and the widened axes "all values equal" (of one value)
    cfg = claims_cfg(seeds=range(1), alphas=(0.0,), methods={"pi": {"method": "linear"}})
    fig = draw(scatter_figure({"correlations": []}, cfg, _scatter_recs({"pi": [(2.0, 40.0, 2.0)]})))
    for ax in fig.axes:
        assert ax.get_title().endswith("\n1 checkpoint"), ax.get_title()
        widened = next(t.get_text() for t in ax.texts if t.get_gid() == WIDENED_GID)
        assert widened == "x axis widened: one value\ny axis widened: one value"
        assert [t.get_text() for t in ax.get_legend().get_texts()] == ["pi: n=1, no rho (n < 3)"]


def test_empty_claim_panels_say_why():
    # The GPU study's alpha_curves / metric_vs_performance: empty axes with no word. Now each says why.
    cfg = claims_cfg(seeds=[0])
    too_short = ("longshort_ppl at length 512: only 0 of num_samples=8 sequences of length=512 tokens could be cut "
                 "(longest document: 300 tokens): use a source with longer documents")
    recs = {"pi_a0_s0": {"status": "ok", "results": {"longshort_misalignment": {"sce_512": 3.0}},
                         "not_scored": {"longshort_ppl": too_short}},
            "pi_a0.1_s0": {"status": "failed", "stage": "train"}}
    for fig in (draw(alpha_figure(cfg, recs)), draw(scatter_figure({"correlations": []}, cfg, recs))):
        for ax in fig.axes:
            note = " ".join(next(t for t in ax.texts if t.get_gid() == MISSING_GID).get_text().split())
            assert "the text could not fill the length: 0 of 8 sequences of 512 tokens" in note, note
            assert "run failed (train)" in note, note
            assert ax.get_yticks().size == 0  # no 0..1 value ticks on an axis with nothing on it
            inside_figure(fig, next(t for t in ax.texts if t.get_gid() == MISSING_GID))


def test_base_figure_without_a_per_position_curve_says_so():
    # the right panel was bare 0-1 axes without a word when the base recorded no curve (an audit)
    from torchtune_longshort.study.claim_figures import base_figure

    base = {"status": "ok", "results": {"longshort_ppl": {"ppl_512": 55.0}}, "curves": {}}
    fig = draw(base_figure(claims_cfg(), base))
    notes = [t.get_text() for t in fig.axes[1].texts if t.get_gid() == MISSING_GID]
    assert len(notes) == 1 and "no per-position loss" in notes[0].replace("\n", " ")
    assert len(fig.axes[1].get_yticks()) == 0


def test_base_figure_breaks_its_line_at_a_length_without_a_value_and_names_it():
    # the base scored 128 and 1k but not 512 (refused): 512 was left off the axis, the line joined 128 to 1k unnamed
    from torchtune_longshort.study.claim_figures import base_figure

    cfg = claims_cfg(ppl_lengths=[128, 512, 1024])
    base = {"status": "ok", "results": {"longshort_ppl": {"ppl_128": 20.0, "ppl_1k": 900.0}}, "curves": {},
            "not_scored": {"longshort_ppl": "longshort_ppl at length 512: refused"}}
    ax = draw(base_figure(cfg, base)).axes[0]
    line = ax.lines[0]
    assert list(line.get_xdata()) == [128, 512, 1024]
    y = line.get_ydata()
    assert y[0] == 20.0 and math.isnan(y[1]) and y[2] == 900.0
    notes = [" ".join(t.get_text().split()) for t in ax.texts if t.get_gid() == MISSING_GID]
    assert len(notes) == 1 and notes[0].startswith("no perplexity at 512: "), notes


def test_base_figure_position_axis_ticks_read_as_plain_numbers():
    # docs/study's base_failure.png labelled its log2 position axis 2^-1, 2^1, .., 2^11 where every other length and
    # position axis of the reports reads 128, 512, 1k; the reference: each tick's own location
    from torchtune_longshort.study.claim_figures import base_figure
    from torchtune_longshort.lengths import parse_length

    cfg = claims_cfg(ppl_lengths=[512, 2048])
    base = {"status": "ok", "results": {"longshort_ppl": {"ppl_512": 30.0, "ppl_2k": 80.0}},
            "curves": {str(n): [4.0 + i / n for i in range(n)] for n in (512, 2048)}}
    fig = draw(base_figure(cfg, base))
    got = ticks(fig.axes[1].xaxis)
    assert len(got) >= 5 and got[0][0] < 1 and got[-1][0] >= 2047, got  # the last position (2047) labelled
    for loc, text in got:
        assert not any(c in text for c in "$^e"), got
        number = float(text) if "." in text else parse_length(text)
        assert number is not None and math.isclose(number, loc), (loc, text)
    no_overlap(drawn_ticklabels(fig.axes[1].xaxis), fig.canvas.get_renderer())


def test_alpha_curve_breaks_at_an_alpha_without_a_value():
    # alpha 0.1 failed between two alphas with values: the ppl line went straight from 0 to 0.3
    cfg = claims_cfg(seeds=[0], alphas=(0.0, 0.1, 0.3))
    ok = lambda v: {"status": "ok", "results": {"longshort_ppl": {"ppl_512": v}}}  # noqa: E731
    recs = {"pi_a0_s0": ok(30.0), "pi_a0.1_s0": {"status": "failed", "stage": "train"}, "pi_a0.3_s0": ok(28.0)}
    ax = draw(alpha_figure(cfg, recs)).axes[0]
    line = ax.containers[0].lines[0]
    assert list(line.get_xdata()) == [0, 1, 2]
    y = line.get_ydata()
    assert y[0] == 30.0 and math.isnan(y[1]) and y[2] == 28.0
    assert "run failed (train)" in " ".join(t.get_text() for t in ax.texts if t.get_gid() == MISSING_GID)
