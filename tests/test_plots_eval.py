"""The evaluation report's figures and the value-axis rule every report plot shares, rendered on edge-case data and
checked through matplotlib's objects: near-equal values, values spanning decades, one length, one-row and
one-column heatmaps, and heatmap cells that state the n samples behind them."""

from __future__ import annotations

import json
import math

import pytest
from plot_helpers import check_every_series_visible, check_plain_value_axis, draw, inside_figure, no_overlap, ticks

from torchtune_longshort.plots.axes import MIN_SPAN_FRACTION, WIDENED_GID, value_limits
from torchtune_longshort.eval.report.figures import curves_figure, heatmap_figure, heatmaps, ppl_figure, short_label
from torchtune_longshort.eval.report.results_io import even_cell_counts, load_cell_counts


def test_ppl_near_equal_values_linear_with_plain_ticks():
    runs = {"a": {"longshort_ppl": {"ppl_128": 110.072, "ppl_256": 110.0745, "ppl_1k": 110.079}},
            "b": {"longshort_ppl": {"ppl_128": 110.0731, "ppl_256": 110.0752}}}
    fig = draw(ppl_figure(runs))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    check_plain_value_axis(ax.yaxis)
    assert [t for _, t in ticks(ax.xaxis)] == ["128", "256", "1k"]
    assert ax.get_xlabel() == "sequence length (tokens)" and ax.get_ylabel() == "perplexity"
    assert ax.get_title() == "Perplexity by sequence length"  # it had none; the per-position figure has its own
    no_overlap(ax.get_yticklabels(), fig.canvas.get_renderer())


def test_ppl_of_runs_that_agree_shows_every_runs_markers():
    """Four runs of one checkpoint (ours, hf, stock lm-eval hf, hf with peft=) agree to 1e-7: each run's filled
    marker covered the one drawn before it (a square 1 pt smaller left of a circle a ring under 1 pt wide)."""
    runs = {n: {"longshort_ppl": {"ppl_256": 38.4684, "ppl_1k": 13.448}} for n in ("ours", "hf", "lm_eval_hf", "peft")}
    fig = draw(ppl_figure(runs))
    check_every_series_visible(fig.axes[0], fig)


def test_ppl_over_decades_log_with_plain_ticks():
    runs = {"a": {"longshort_ppl": {"ppl_128": 9.5, "ppl_512": 80.0, "ppl_2k": 2500.0}}}
    fig = draw(ppl_figure(runs))
    ax = fig.axes[0]
    assert ax.get_yscale() == "log"
    check_plain_value_axis(ax.yaxis)
    assert {"10", "100", "1000"} <= {t for _, t in ticks(ax.yaxis)}
    assert [t.get_text() for t in ax.yaxis.get_minorticklabels() if t.get_text()] == []


# ten folder names: two legend columns of them ran off both sides of the figure
FOLDER_LABELS = [f"run_with_a_quite_long_folder_name_number_{i:02d}_alpha0.{i}" for i in range(10)]
LONG_LABEL = "baseline_llama2_7b_pi_linear_scale8_alpha0.3_seed1234_finetune_longshort_step2000"


@pytest.mark.parametrize("labels", [[f"r{i:02d}" for i in range(22)], [LONG_LABEL],
                                    FOLDER_LABELS],
                         ids=["22_short", "1_long", "10_long"])
def test_ppl_legend_of_many_runs_or_long_labels_sits_under_the_axes(labels):
    # 22 runs: the legend covered the 16k points and r18-r21 fell off the figure; one folder-name label pushed the
    # axes into the figure's right half and was cut at its left edge (an audit); ten long labels in two columns
    # ran off both sides of the figure
    runs = {lab: {"longshort_ppl": {"ppl_1k": 10 + i, "ppl_4k": 12 + i, "ppl_16k": 15 + i}}
            for i, lab in enumerate(labels)}
    fig = draw(ppl_figure(runs))
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1
    inside_figure(fig, fig.legends[0])
    renderer = fig.canvas.get_renderer()
    assert fig.legends[0].get_window_extent(renderer).y1 <= ax.xaxis.label.get_window_extent(renderer).y0
    assert ax.get_window_extent(renderer).width / fig.dpi > 4  # the axes keep the figure's width
    shown = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(shown) == len(labels) and all(len(t) <= 48 for t in shown)
    assert shown[0].startswith(labels[0][:20]) and shown[0].endswith(labels[0][-20:])


def test_ppl_a_run_without_a_finite_value_is_named_under_the_axes():
    # a run whose every ppl was NaN was left out of the legend without a word (an audit)
    from torchtune_longshort.plots.axes import MISSING_GID

    runs = {"r1": {"longshort_ppl": {"ppl_1k": 10.0, "ppl_4k": 11.0, "ppl_16k": float("nan")}},
            "r3": {"longshort_ppl": {"ppl_1k": float("nan"), "ppl_16k": float("nan")}},
            "r4": {"longshort_passkey": {"acc_1k": 1.0}}}  # r4 never ran the task: not named
    fig = draw(ppl_figure(runs))
    notes = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == MISSING_GID]
    # a length NaN in every run left the axis without a word too
    assert notes == ["not drawn (no finite perplexity): r3; not scored by any run: 16k tokens (reasons in the "
                     "report)"]
    assert [t.get_text() for t in fig.axes[0].get_legend().get_texts()] == ["r1"]


def test_ppl_a_length_one_run_scored_nan_breaks_its_line_and_is_named():
    # run a scored NaN at 384 (the others scored it): its line was drawn straight from 256 to 768, as if measured
    from torchtune_longshort.plots.axes import MISSING_GID

    runs = {"a": {"longshort_ppl": {"ppl_256": 20.0, "ppl_384": float("nan"), "ppl_768": 30.0}},
            "b": {"longshort_ppl": {"ppl_256": 21.0, "ppl_384": 25.0, "ppl_768": 29.0}}}
    fig = draw(ppl_figure(runs))
    a, b = fig.axes[0].lines
    assert list(a.get_xdata()) == [256, 384, 768] and list(b.get_xdata()) == [256, 384, 768]
    assert a.get_ydata()[0] == 20.0 and math.isnan(a.get_ydata()[1]) and a.get_ydata()[2] == 30.0
    assert list(b.get_ydata()) == [21.0, 25.0, 29.0]
    notes = [t.get_text() for t in fig.axes[0].texts if t.get_gid() == MISSING_GID]
    assert notes == ["no finite perplexity at 384 tokens: a (its line breaks there) (reasons in the report)"]


def test_ppl_single_length():
    fig = draw(ppl_figure({"a": {"longshort_ppl": {"ppl_256": 12.0}}}))
    assert [t for _, t in ticks(fig.axes[0].xaxis)] == ["256"]
    check_plain_value_axis(fig.axes[0].yaxis, min_ticks=2)


@pytest.mark.parametrize("lengths, depths", [([(1024, "1k")], [0, 25, 50, 75, 100]),
                                             ([(256, "256"), (512, "512"), (1024, "1k"), (2048, "2k")], [50])])
def test_heatmap_one_column_or_one_row(lengths, depths):
    grid = {L: {d: 0.5 for d in depths} for L in lengths}
    title = "longshort_passkey: accuracy by depth x length (a-rather-long-run-label-from-a-folder-name)"
    counts = {(lab, d): 5 for _, lab in lengths for d in depths}
    fig = draw(heatmap_figure(grid, title, counts))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_xticklabels()] == [lab for _, lab in lengths]
    assert [t.get_text() for t in ax.get_yticklabels()] == [f"{d}%" for d in depths]
    bbox = ax.get_window_extent(fig.canvas.get_renderer())
    assert bbox.width / fig.dpi >= 1.0 and bbox.height / fig.dpi >= 0.5  # cells not squeezed to a sliver
    title_artist = fig._suptitle
    assert "".join(title_artist.get_text().split()) == "".join(title.split())
    inside_figure(fig, title_artist)  # not clipped
    for lab in ax.get_xticklabels() + ax.get_yticklabels() + [ax.xaxis.label, ax.yaxis.label]:
        inside_figure(fig, lab)
    no_overlap(ax.texts, fig.canvas.get_renderer())  # two-line cells (value, n) fit their cells


def _samples(path, task, rows):
    path.mkdir(parents=True, exist_ok=True)
    (path / f"samples_{task}_2026-11-30T10-00-00.000000.jsonl").write_text(
        "\n".join(json.dumps({"doc_id": i, **r}) for i, r in enumerate(rows)) + "\n")


def test_heatmap_cells_state_n_from_the_samples_files(tmp_path):
    # One passkey prompt at 1k/d0 (scored 1.0), two at 1k/d50, three at 2k/d0 of which one refused (NaN): n is 1, 2
    # and 2; a "1.00" from one prompt says so. BABILong's group cell sums its member tasks' prompts.
    rows = ([{"acc": 1.0, "acc_1k": 1.0, "acc_1k_d0": 1.0, "digits_1k_d0": 1.0}]  # one prompt, two cell metrics
            + [{"acc_1k_d50": v} for v in (1.0, 0.0)]
            + [{"acc_2k_d0": v} for v in (1.0, 0.0, float("nan"))])
    _samples(tmp_path / "model", "longshort_passkey", rows)
    _samples(tmp_path / "model", "longshort_babilong_qa1", [{"acc_1k_d0": 1.0}] * 2)
    _samples(tmp_path / "model", "longshort_babilong_qa2", [{"acc_1k_d0": 0.0}] * 3)
    (tmp_path / "model" / "results_2026-11-30T10-00-00.000000.json").write_text(json.dumps(
        {"group_subtasks": {"longshort_babilong": ["longshort_babilong_qa1", "longshort_babilong_qa2"]}}))
    counts = load_cell_counts(tmp_path)
    assert counts["longshort_passkey"] == {("1k", 0): 1, ("1k", 50): 2, ("2k", 0): 2}
    assert counts["longshort_babilong"] == {("1k", 0): 5}
    runs = {"run": {"longshort_passkey": {"acc_1k_d0": 1.0, "acc_1k_d50": 0.5, "acc_2k_d0": 0.5}}}
    grid = heatmaps(runs)[("longshort_passkey", "run", "acc")]
    fig = draw(heatmap_figure(grid, "passkey", counts["longshort_passkey"]))
    cells = sorted(t.get_text() for t in fig.axes[0].texts)
    assert cells == ["0.50\nn=2", "0.50\nn=2", "1.00\nn=1", "—"]  # —: no 50% depth at 2k
    assert "not known" not in fig.get_suptitle()
    unknown = draw(heatmap_figure(grid, "passkey"))  # no samples files: the title says n is not known
    assert "n per cell not known" in unknown.get_suptitle().replace("\n", " ")
    assert all("n=" not in t.get_text() for t in unknown.axes[0].texts)


def test_heatmap_cells_without_a_value_say_so_and_values_near_an_end_are_not_rounded_onto_it():
    # a NaN cell was plain white without a word, under a pale 0.50; 0.996 and 0.004 printed 1.00 and 0.00 (an audit)
    from torchtune_longshort.plots.axes import MISSING_GID

    runs = {"r": {"longshort_passkey": {"acc_1k_d0": 0.5, "acc_1k_d50": float("nan"), "acc_2k_d0": 0.996,
                                        "acc_2k_d50": 1.0, "acc_4k_d0": 0.004, "acc_4k_d50": 0.0, "acc_8k_d0": 0.3}}}
    fig = draw(heatmap_figure(heatmaps(runs)[("longshort_passkey", "r", "acc")], "passkey"))
    ax = fig.axes[0]
    at = {(round(t.get_position()[0]), round(t.get_position()[1])): t for t in ax.texts}
    assert {k: t.get_text() for k, t in at.items()} == {
        (0, 0): "0.50", (0, 1): "n/a", (1, 0): ">0.99", (1, 1): "1.00", (2, 0): "<0.01", (2, 1): "0.00",
        (3, 0): "0.30", (3, 1): "—"}  # n/a: scored NaN; —: no 50% depth at 8k
    assert at[(0, 1)].get_gid() == MISSING_GID == at[(3, 1)].get_gid()
    assert ax.get_facecolor()[:3] != (1.0, 1.0, 1.0)  # the empty cells are not white


def _wcag_contrast(a, b) -> float:
    """WCAG 2's contrast ratio of two colours (relative luminance of sRGB), the reference of the test below."""
    from matplotlib.colors import to_rgb

    def lum(c):
        r, g, b = ((x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4) for x in to_rgb(c))
        return 0.2126 * r + 0.7152 * g + 0.0722 * b

    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)


def test_heatmap_cell_numbers_read_on_the_colour_map_s_dark_ends():
    # longshort-eval-report's heatmaps wrote every cell's number in black: on RdYlGn's dark red (0.00, a model that
    # never found the passkey) and dark green (1.00) it read at 2.6:1 and 2.7:1, under WCAG's 4.5:1 for small text
    runs = {"r": {"longshort_passkey": {f"acc_{n}k_d{d}": v for n, d, v in
                                        [(1, 0, 0.0), (1, 50, 0.05), (2, 0, 0.5), (2, 50, 0.3), (4, 0, 1.0),
                                         (4, 50, 0.95)]}}}
    fig = draw(heatmap_figure(heatmaps(runs)[("longshort_passkey", "r", "acc")], "passkey"))
    ax = fig.axes[0]
    im = ax.images[0]
    cells = im.get_array()
    for t in ax.texts:
        j, i = (round(p) for p in t.get_position())
        cell = im.cmap(im.norm(cells[i, j]))
        assert _wcag_contrast(t.get_color(), cell) >= 4.5, (t.get_text(), t.get_color(), cells[i, j])


def test_heatmap_n_without_samples_files_only_when_the_samples_divide_evenly():
    # The GPU study's passkey run: 30 samples, 3 lengths x 5 depths, no --limit: 2 per cell. A placeholder row (a
    # length that could not run) or a --limit breaks the even spread: then n stays unknown.
    cells = [(lab, d) for lab in ("8k", "16k", "32k") for d in (0, 25, 50, 75, 100)]
    assert even_cell_counts(30, None, cells) == {c: 2 for c in cells}
    assert even_cell_counts(31, None, cells) == {} and even_cell_counts(30, 10, cells) == {}
    assert even_cell_counts(None, None, cells) == {}


def test_per_position_curve_no_offset():
    curves = {"run": {256: [5.000001 + 1e-6 * (i % 3) for i in range(256)]}}
    fig = draw(curves_figure(curves))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    check_plain_value_axis(ax.yaxis, min_ticks=2)


def test_per_position_points_sit_at_the_centre_of_the_positions_they_average():
    """Buckets of 2 over positions 0..4: (0, 1), (2, 3), (4). The points were drawn at 1, 3, 5 (half a bucket right,
    the last one past the curve's end)."""
    line = curves_figure({"run": {5: [1.0, 3.0, 5.0, 7.0, 9.0]}}, bucket=2).axes[0].lines[0]
    assert list(line.get_xdata()) == [0.5, 2.5, 4.0] and list(line.get_ydata()) == [2.0, 6.0, 9.0]
    assert line.get_label() == "run L=5 (means of 2 positions)"


def test_per_position_legend_of_many_curves_sits_under_the_axes_and_curves_past_ten_differ():
    # 7 runs x 3 lengths of folder-name labels: the legend covered most of the curves, its labels uncut, and the
    # 11th curve had the 1st's colour and style
    curves = {f"{LONG_LABEL}_{i}": {256: [1.0 + i] * 256, 384: [2.0] * 384, 768: [3.0] * 768} for i in range(7)}
    fig = draw(curves_figure(curves))
    ax = fig.axes[0]
    assert ax.get_legend() is None and len(fig.legends) == 1
    inside_figure(fig, fig.legends[0])
    renderer = fig.canvas.get_renderer()
    assert fig.legends[0].get_window_extent(renderer).y1 <= ax.xaxis.label.get_window_extent(renderer).y0
    shown = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(shown) == 21 and all(t.split(" L=")[0] in (short_label(r) for r in curves) for t in shown)
    styles = [(ln.get_color(), ln.get_linestyle()) for ln in ax.lines]
    assert len(set(styles)) == 21
    assert list(ax.lines[0].get_ydata()) == [1.0] * 256  # the data, unchanged


def test_per_position_legend_says_which_curves_average_positions():
    """256 and 1024 on one figure (the default, ~200 points a curve): the 1k line's points are 5-position means,
    the 256 line's single positions; the legend said only "L=1024", so its smoother line read as a lower loss."""
    ax = curves_figure({"ours": {256: [1.0] * 256, 1024: [1.0] * 1024}}).axes[0]
    assert [len(line.get_xdata()) for line in ax.lines] == [256, 205]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["ours L=256", "ours L=1024 (means of 5 positions)"]


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


@pytest.mark.parametrize("scale", [3e-9, 2e-5, 2e-3, 5e7, 3e9])
def test_linear_value_axis_reads_right_at_small_and_large_magnitudes(scale):
    # matplotlib's ScalarFormatter(useOffset=False) fails here: an exponent text below 1e-4 and from 1e6 up, and with
    # set_scientific(False) every tick under 1e-8 reads 0.000... (its __call__ rounds |x| < 1e-8 to 0)
    from matplotlib.figure import Figure

    from torchtune_longshort.plots.axes import value_axis

    fig = Figure(figsize=(4, 3))
    ax = fig.subplots()
    values = [scale, 1.8 * scale, 1.3 * scale, -0.2 * scale]
    ax.plot(range(4), values)
    assert value_axis(ax, values) == "linear"
    check_plain_value_axis(draw(fig).axes[0].yaxis)


def test_ppl_near_equal_values_get_a_floor_and_a_note():
    # The quick study's perplexities: 414.3 / 412.6 / 408.1, which a tight axis drew as a steep fall.
    runs = {"CE": {"longshort_ppl": {"ppl_128": 414.3, "ppl_256": 412.6, "ppl_512": 408.1}},
            "CE + 0.3": {"longshort_ppl": {"ppl_128": 414.3, "ppl_256": 412.8, "ppl_512": 408.1}},
            "CE again": {"longshort_ppl": {"ppl_128": 414.3, "ppl_256": 412.6, "ppl_512": 408.1}}}
    fig = draw(ppl_figure(runs))
    ax = fig.axes[0]
    check_every_series_visible(ax, fig)  # "CE again" draws exactly over "CE"
    assert [t.get_text() for t in ax.get_legend().get_texts()] == list(runs)
    lo, hi = ax.get_ylim()
    assert hi - lo >= MIN_SPAN_FRACTION * 414.3 * 0.999
    assert (414.3 - 408.1) / (hi - lo) < 0.1  # the 6-point spread fills a small band, not the axis
    check_plain_value_axis(ax.yaxis)
    note = [x for x in ax.texts if x.get_gid() == WIDENED_GID]
    assert len(note) == 1 and "1.5%" in note[0].get_text()
    inside_figure(fig, note[0])


def test_a_panel_with_only_reference_lines_is_empty_for_its_missing_note():
    # an all-missing study panel kept its L0 / L lines and so its meaningless 0-1 value ticks, the reason under
    # its x label instead of in its centre (an audit)
    from matplotlib.figure import Figure

    from torchtune_longshort.plots.axes import MISSING_GID, note_missing

    ax = Figure().subplots()
    ax.axvline(128, ls=":")
    ax.axvline(256, ls=":")
    note_missing(ax, "not drawn: no value", 4)
    note = [t for t in ax.texts if t.get_gid() == MISSING_GID]
    assert len(ax.get_yticks()) == 0 and len(note) == 1 and note[0].get_position() == (0.5, 0.5)
    ax2 = Figure().subplots()
    ax2.plot([1, 2], [3, 4])
    note_missing(ax2, "not drawn: one run", 4)
    assert len(ax2.get_yticks()) > 0  # data drawn: its ticks stay, the note goes under the x label
