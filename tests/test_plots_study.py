"""The study report's figures of its tables (lines over length, depth x length heatmaps), rendered from small
records and tables and checked through matplotlib's objects: why a cell is empty (no run, a failed run, a length the
text could not fill), seed counts from what a point holds, heatmap cells with their n, labels that never overlap
(extents measured with the renderer), and records of earlier versions read in the current layout."""

from __future__ import annotations

import numpy as np
import pytest
from matplotlib.colors import to_rgb
from plot_helpers import (check_every_series_visible, check_plain_value_axis, draw, drawn_ticklabels, inside_figure,
                          lengths_cfg, no_overlap, study, table, texts, ticks)

from torchtune_longshort.plots.axes import MIN_SPAN_FRACTION, MISSING_GID, QUICK_MARK, WIDENED_GID
from torchtune_longshort.eval.tasks.passkey.task import DIGITS_CHANCE
from torchtune_longshort.study.figures import LENGTH_MARKS_GID, babilong_figure, line_figure, passkey_figure
from torchtune_longshort.study.records import short_reason, upgraded, value, why_empty
from torchtune_longshort.study.tables import build_tables


def _note(ax):
    notes = [t.get_text() for t in ax.texts if t.get_gid() == MISSING_GID]
    assert len(notes) <= 1, notes
    return " ".join(notes[0].split()) if notes else ""


def test_study_misalignment_near_equal_no_offset():
    # The quick study's numbers: SCE 12.19 at both lengths, alpha 0.3 lower by ~1e-3.
    lengths = [256, 512]
    t = table({0.0: [12.19421, 12.19433], 0.3: [12.19276, 12.19268]}, lengths)
    fig = draw(line_figure(lengths_cfg(lengths), t, lengths, "misalignment (SCE, Eq. 4)"))
    ax = fig.axes[0]
    assert ax.get_yscale() == "linear"
    check_plain_value_axis(ax.yaxis)
    lo, hi = ax.get_ylim()  # a 0.01 % spread is not blown up to the whole axis
    assert hi - lo >= MIN_SPAN_FRACTION * 12.19433 * 0.999 and lo <= 12.19268 and hi >= 12.19433
    assert any(x.get_gid() == WIDENED_GID for x in ax.texts)
    assert [t for _, t in ticks(ax.xaxis)] == ["128", "256", "512"]  # L0 is marked as well
    no_overlap(ax.get_yticklabels() + [ax.yaxis.label], fig.canvas.get_renderer())
    inside_figure(fig, ax.title)
    assert _note(ax) == ""  # every cell drawn: no note


def test_line_figure_breaks_a_line_at_a_cell_without_a_value():
    # alpha 0 has no value at 512 (its run could not fill the length): the line was drawn straight from 256 to 1k
    lengths = [256, 512, 1024]
    t = table({0.0: [40.0, None, 80.0], 0.3: [41.0, 50.0, 82.0]}, lengths)
    fig = draw(line_figure(lengths_cfg(lengths), t, lengths, "perplexity"))
    ax = fig.axes[0]
    a0, a3 = [c.lines[0] for c in ax.containers]  # each errorbar's data line
    assert list(a0.get_xdata()) == lengths and np.isnan(a0.get_ydata()[1])
    assert [a0.get_ydata()[0], a0.get_ydata()[2]] == [40.0, 80.0] and list(a3.get_ydata()) == [41.0, 50.0, 82.0]
    assert "alpha=0 at 512" in _note(ax)


_TOO_SHORT = ("longshort_ppl at length {L}: only {k} of num_samples=8 sequences of length={n} tokens could be cut "
              "(longest document: 300 tokens): use a source with longer documents, raise chunks_per_doc, or lower "
              "the length / num_samples")


def test_line_figure_notes_say_why_a_cell_is_empty():
    # The GPU study's case: every run that succeeded has no perplexity because the text could not fill the lengths
    # (the old figure said "no successful run" in every panel); one run failed in training, one never ran.
    cfg = study(L=256, alphas=(0.0, 0.1), methods={"pi": {"method": "linear"}, "yarn": {"method": "yarn"}},
                ppl_lengths=[256, 512], misalignment_lengths=[256, 512], eval_base=True)
    ok = {"status": "ok", "results": {"longshort_ppl": {}}, "not_scored": {"longshort_ppl": " | ".join(
        _TOO_SHORT.format(L=lab, k=k, n=n) for lab, k, n in (("256", 1, 256), ("512", 0, 512)))}}
    recs = {"base": ok, "pi_a0_s0": ok, "pi_a0.1_s0": ok, "yarn_a0_s0": {"status": "failed", "stage": "train"},
            "yarn_a0.1_s0": {"status": "not run"}}
    fig = draw(line_figure(cfg, build_tables(cfg, recs)["ppl"], [256, 512], "perplexity"))
    pi, yarn = fig.axes
    assert "no successful run" not in " ".join(texts(fig))
    assert _note(pi) == ("not drawn: every row at 256: the text could not fill the length: 1 of 8 sequences of 256 "
                         "tokens; longest document 300 tokens every row at 512: the text could not fill the length: "
                         "0 of 8 sequences of 512 tokens; longest document 300 tokens")
    assert "alpha=0 at every length: run failed (train)" in _note(yarn)
    assert "alpha=0.1 at every length: not run" in _note(yarn)
    assert "base at 256: the text could not fill the length" in _note(yarn)
    assert [pi.get_title(), yarn.get_title()] == ["pi: nothing drawn", "yarn: nothing drawn"]
    r = fig.canvas.get_renderer()
    for ax in fig.axes:  # the note is inside the figure and runs into no label
        note = next(t for t in ax.texts if t.get_gid() == MISSING_GID)
        inside_figure(fig, note)
        no_overlap([note, ax.xaxis.label, ax.title] + ax.get_xticklabels(), r)


@pytest.mark.parametrize("n, title", [(1, "pi: 1 seed"), (3, "pi: mean ± sd over 3 seeds")])
def test_line_figure_title_counts_the_seeds_its_points_hold(n, title):
    # A 3-seed config whose cells hold one value each (the other seeds not run) is "1 seed", not "over seeds".
    lengths = [256, 512]
    cfg = lengths_cfg(lengths, seeds=[0, 1, 2])
    fig = draw(line_figure(cfg, table({0.0: [40.0, 60.0], 0.3: [41.0, 62.0]}, lengths, n=n), lengths, "perplexity"))
    assert fig.axes[0].get_title() == title


def test_why_empty_and_short_reasons():
    recs = {"ok": {"status": "ok", "not_scored": {"longshort_babilong_qa4": "longshort_babilong_qa4: length 8k: "
                   "BABILong data file not found: /work/x/babilong_data/8k/qa4.jsonl (babilong_data_dir='/work/x')",
                   "longshort_babilong_qa1": "longshort_babilong_qa1: a generate_until prompt longer than the 32752 "
                   "tokens --model longshort can take (max_length=32768): refused, scored NaN. Fix: raise max_length"},
                   "group_subtasks": {"longshort_babilong": ["longshort_babilong_qa1", "longshort_babilong_qa4"]}},
            "failed": {"status": "failed", "stage": "eval"}}
    assert why_empty(recs, ["gone"], "longshort_babilong", "8k") == "not run"
    assert why_empty(recs, ["failed", "gone"], "longshort_babilong", "8k") == "run failed (eval)"
    assert why_empty(recs, ["ok"], "longshort_babilong", "8k") == (
        "prompt longer than the 32752 tokens the model takes; no data: length 8k: BABILong data file not found: "
        "8k/qa4.jsonl")
    assert why_empty(recs, ["ok"], "longshort_babilong", "16k") == "prompt longer than the 32752 tokens the model takes"
    assert why_empty({"ok": {"status": "ok"}}, ["ok"], "longshort_ppl", "1k") == "no value reported"
    assert short_reason("x: something else went wrong") == "not scored: something else went wrong"


def test_records_of_earlier_versions_read_in_the_current_layout():
    # docs/study/cpu_small's records: one task per length, depths as acc_depth_<d>
    old = {"status": "ok", "results": {"long_ppl_128": {"ppl": 41.78}, "long_ppl_1k": {"ppl": 37.47},
                                       "misalignment_256": {"sce": 7.58, "jeffreys": 0.0012},
                                       "passkey_512": {"acc": 0.5, "acc_depth_50": 1.0},
                                       "babilong_longshort": {"acc_1k_d0": 0.0}}}
    new = upgraded(old)
    assert new["results"] == {"longshort_ppl": {"ppl_128": 41.78, "ppl_1k": 37.47},
                              "longshort_misalignment": {"sce_256": 7.58, "jeffreys_256": 0.0012},
                              "longshort_passkey": {"acc_512": 0.5, "acc_512_d50": 1.0},
                              "babilong_longshort": {"acc_1k_d0": 0.0}}
    assert value(new, "ppl", 1024) == 37.47 and value(new, "jeffreys", 256) == 0.0012
    assert value(new, "babilong", "1k_d0") == 0.0 and "long_ppl_128" in old["results"]  # old record untouched
    assert upgraded(new) == new


def _babilong_recs(cfg, seeds_ok=(0, 1)):
    recs = {}
    for r in cfg.grid:
        if r.method != "pi" or r.seed not in seeds_ok:
            continue  # yarn: never ran
        res = {f"longshort_babilong_qa{q}": {f"acc_1k_d{d}": 1.0 if q == 1 else 0.0 for d in (0, 50, 100)}
               for q in range(1, 6)}
        res["longshort_babilong"] = {f"acc_1k_d{d}": 0.2 for d in (0, 50, 100)}
        recs[r.key] = {"status": "ok", "results": res, "spec": {"eval": {"babilong": {"n": 1, "qa": "qa1,qa2,"
                                                                                            "qa3,qa4,qa5"}}}}
    return {r.key: recs.get(r.key, {"status": "not run"}) for r in cfg.grid}


def test_babilong_heatmap_labels_do_not_overlap_and_cells_state_n():
    # docs/study/cpu_small's grid: 2 methods x 3 alphas, one length, three depths (its old figure's depth labels
    # ran into the next panel's cells); one method never ran.
    cfg = study(alphas=(0.0, 0.1, 0.3), seeds=(0, 1), methods={"pi": {"method": "linear"}, "yarn": {"method": "yarn"}},
                babilong={"lengths": ["1k"], "depths": [0, 50, 100], "n": 3, "qa": "qa1,qa2,qa3,qa4,qa5"})
    fig = draw(babilong_figure(cfg, _babilong_recs(cfg)))
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    r = fig.canvas.get_renderer()
    labels = [fig._suptitle] + [t for ax in fig.axes for t in (
        ax.get_xticklabels() + ax.get_yticklabels() + [ax.xaxis.label, ax.yaxis.label, ax.title] + ax.texts)]
    no_overlap(labels, r)
    for t in labels:
        if t.get_text():
            inside_figure(fig, t)
    for ax in panels:  # one length: cells still readable
        assert ax.get_window_extent(r).width / fig.dpi >= 1.0
    assert [t.get_text() for t in panels[-1].get_xticklabels()] == ["1k"]
    assert [t.get_text() for t in panels[0].get_yticklabels()] == ["0%", "50%", "100%"]
    # the run's recorded n (1 per QA task), not the config's 3: 5 QA tasks x 1 prompt x 2 seeds
    assert [t.get_text() for t in panels[0].texts] == ["0.20\nn=10"] * 3
    assert "n = prompts per cell (5 per run), mean over 2 seeds" in fig.get_suptitle().replace("\n", " ")
    empty = [t for t in panels[3].texts]  # yarn, alpha 0: not run, in dark text on a light cell
    assert [t.get_text() for t in empty] == ["not run"] * 3
    assert all(np.mean(to_rgb(t.get_color())) < 0.5 for t in empty)  # never white on the light empty cell


def test_passkey_heatmap_marks_chance_level():
    cfg = study(L=512, alphas=(0.0, 0.1), seeds=[0], ppl_lengths=[128, 512], passkey_lengths=[128, 512],
                misalignment_lengths=[512], metadata={"passkey_depths": [0, 50]}, passkey_num_samples=2)
    recs = {"pi_a0_s0": {"status": "ok", "results": {"longshort_passkey": {
                "digits_128_d0": 0.05, "digits_128_d50": 0.9, "digits_512_d0": 0.1, "digits_512_d50": 0.0}}},
            "pi_a0.1_s0": {"status": "failed", "stage": "train"}}
    fig = draw(passkey_figure(cfg, recs))
    cbar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    marks = [ln for ln in cbar.get_lines() if np.allclose(ln.get_ydata(), DIGITS_CHANCE)]
    assert len(marks) == 1 and marks[0].get_visible()
    assert f"chance {DIGITS_CHANCE:g}" in cbar.get_ylabel()
    title = fig.get_suptitle().replace("\n", " ")
    assert f"chance level (random digits) {DIGITS_CHANCE:g}" in title and "1 seed" in title and "±" not in title
    panels = [ax for ax in fig.axes if ax is not cbar]
    assert [t.get_text() for t in panels[0].texts] == ["0.05\nn=2", "0.10\nn=2", "0.90\nn=2", "0.00\nn=2"]
    assert [t.get_text() for t in panels[1].texts] == ["failed"] * 4
    inside_figure(fig, fig._suptitle)


def test_passkey_chance_is_the_digit_score_of_random_guesses():
    import random

    from torchtune_longshort.eval.tasks.passkey.task import digit_accuracy

    rng = random.Random(0)
    keys = ["".join(rng.choice("0123456789") for _ in range(5)) for _ in range(4000)]
    guesses = ["".join(rng.choice("0123456789") for _ in range(5)) for _ in keys]
    assert np.mean([digit_accuracy(g, k) for g, k in zip(guesses, keys)]) == pytest.approx(DIGITS_CHANCE, abs=0.01)


def test_study_coinciding_lines_all_visible():
    lengths = [128, 256, 512]
    t = table({0.0: [414.3, 412.6, 408.1], 0.1: [414.3, 412.6, 408.1], 0.3: [414.3, 412.6, 408.1]}, lengths)
    fig = draw(line_figure(lengths_cfg(lengths, alphas=[0.0, 0.1, 0.3]), t, lengths, "perplexity"))
    check_every_series_visible(fig.axes[0], fig)


def test_quick_study_figures_say_so():
    lengths = [256, 512]
    t = table({0.0: [40.0, 60.0]}, lengths)
    fig = draw(line_figure(lengths_cfg(lengths, quick=True), t, lengths, "perplexity"))
    assert fig.get_suptitle() == QUICK_MARK and "quick (smoke) run" in QUICK_MARK
    inside_figure(fig, fig._suptitle)
    assert not draw(line_figure(lengths_cfg(lengths), t, lengths, "perplexity")).get_suptitle()


def test_a_heatmap_of_many_alphas_wraps_its_panels_within_the_widest_figure():
    # 8 alphas x 7 lengths made one row of 8 panels, 58 inches wide: the panels wrap onto rows of a figure at most
    # MAX_FIGURE_WIDTH_IN wide, each panel still in its place (method, alpha), length labels under every panel with
    # no panel right below it (the last row, and above a wrapped row's gap), depth labels on each row's first panel.
    from torchtune_longshort.lengths import length_label
    from torchtune_longshort.plots.panels import MAX_FIGURE_WIDTH_IN
    from torchtune_longshort.study.eval_config import metric_of

    alphas = (0.0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
    lengths = [128 * 2 ** i for i in range(7)]
    cfg = study(L=512, alphas=alphas, seeds=[0], ppl_lengths=lengths[:2], passkey_lengths=lengths,
                misalignment_lengths=[512], metadata={"passkey_depths": [0, 50]}, passkey_num_samples=2,
                methods={"pi": {"method": "linear"}, "yarn": {"method": "yarn"}})
    recs = {f"{m}_a{a:g}_s0": {"status": "ok", "results": {"longshort_passkey": {
        metric_of("passkey_digits", n, depth=d)[1]: round(i / 8, 3) for n in lengths for d in (0, 50)}}}
        for m in ("pi", "yarn") for i, a in enumerate(alphas)}
    fig = draw(passkey_figure(cfg, recs))
    r = fig.canvas.get_renderer()
    assert fig.get_figwidth() <= MAX_FIGURE_WIDTH_IN
    panels = [ax for ax in fig.axes if ax.get_label() != "<colorbar>" and ax.get_visible()]
    assert [ax.get_title() for ax in panels] == [f"{m}, alpha={a:g}" for m in ("pi", "yarn") for a in alphas]
    assert [t.get_text() for t in panels[9].texts] == ["0.12\nn=2"] * 14  # yarn, alpha 0.05: its own record
    cols = {round(ax.get_position().x0, 3) for ax in panels}
    assert 1 < len(cols) < len(alphas)  # wrapped, not one column per alpha
    rows = sorted({round(ax.get_position().y0, 3) for ax in panels}, reverse=True)
    at = {(round(ax.get_position().x0, 3), rows.index(round(ax.get_position().y0, 3))) for ax in panels}
    for ax in panels:
        x0, y0 = round(ax.get_position().x0, 3), rows.index(round(ax.get_position().y0, 3))
        below = (x0, y0 + 1) in at  # a panel right below it: its labels would run into that panel's title
        labelled = [t.get_text() for t in ax.get_xticklabels()]
        assert labelled == ([length_label(n) for n in lengths] if not below else [""] * len(lengths)), ax.get_title()
        assert bool(ax.get_yticklabels()[0].get_text()) == (x0 == min(cols))
        inside_figure(fig, ax.title)
    no_overlap([t for ax in panels for t in ax.get_xticklabels() + [ax.title] if t.get_text()], r)


def test_a_line_figure_of_many_methods_wraps_its_panels_within_the_widest_figure():
    # One panel per method, 5 inches each: 8 methods made a 40-inch row; they wrap onto rows of a figure at most
    # MAX_FIGURE_WIDTH_IN wide, each panel its method's, no title or label running into another.
    from torchtune_longshort.plots.panels import MAX_FIGURE_WIDTH_IN

    lengths = [128, 256, 512]
    methods = ["pi", "ntk", "yarn", "abf", "eabf", "clex", "dynamic_ntk", "llama3"]
    one = table({0.0: [40.0, 50.0, 60.0], 0.3: [41.0, 49.0, 55.0]}, lengths)["methods"]["pi"]
    t = {"methods": {m: one for m in methods}}
    fig = draw(line_figure(lengths_cfg(lengths, alphas=[0.0, 0.3]), t, lengths, "perplexity"))
    assert fig.get_figwidth() <= MAX_FIGURE_WIDTH_IN
    panels = [ax for ax in fig.axes if ax.get_visible()]
    assert [ax.get_title().split(":")[0] for ax in panels] == methods
    assert len({round(ax.get_position().y0, 3) for ax in panels}) > 1  # wrapped
    r = fig.canvas.get_renderer()
    no_overlap([t for ax in panels for t in [ax.title, ax.xaxis.label, ax.yaxis.label]], r)
    for ax in panels:
        inside_figure(fig, ax.title)
        assert ax.get_window_extent(r).width / fig.dpi >= 2.5  # panels not squeezed to fit


@pytest.mark.parametrize("log", [False, True])
def test_the_length_marks_stay_clear_of_the_points_the_legend_and_the_title(log):
    # The GPU study's panel: L is the last length and the base rises to the top right corner (4.5 at 8k, 15.4 at
    # 16k); an "L" drawn inside the frame sat on its right edge over the base's last point, and legends hid "L0".
    # log: values over a decade.
    lengths = [256, 512]
    cfg = lengths_cfg(lengths, L=512)
    top = 154.0 if log else 15.4
    fig = draw(line_figure(cfg, table({0.0: [12.65, 9.52], 0.1: [13.68, 10.14], None: [4.53, top]}, lengths),
                           lengths, "perplexity"))
    ax = fig.axes[0]
    assert ax.get_yscale() == ("log" if log else "linear")
    r = fig.canvas.get_renderer()
    (marks,) = [c for c in ax.child_axes if c.get_gid() == LENGTH_MARKS_GID]
    labels = drawn_ticklabels(marks.xaxis)
    assert [t.get_text() for t in labels] == ["L0", "L"]
    assert [x for x, _ in ticks(marks.xaxis)] == [cfg.L0, cfg.L]
    frame = ax.get_window_extent(r)
    for t in labels:  # above the frame (so no point or legend covers it), inside the figure, under the title
        box = t.get_window_extent(r)
        assert box.y0 >= frame.y1 - 1, (t.get_text(), box, frame)
        inside_figure(fig, t)
    no_overlap(labels + [ax.title], r)
    assert ax.get_legend() is not None and ax.get_legend().get_window_extent(r).y1 <= frame.y1 + 1


def test_convergence_and_per_position_figures_of_a_resumed_and_an_early_stopped_run(tmp_path):
    """A run's metrics.jsonl as a resume after a crash leaves it (steps 1-3, step 3 logged again by the resumed
    run, a line torn by a kill) and one stopped early (stop_after_step=2): each step is read once, the last row
    written (the convergence line went back from step 3 to 3 and the last-steps mean counted the lost step 3; the
    torn line ended the report in JSONDecodeError), in step order. The per-position figure's x axis says tokens, as
    the eval report's does."""
    import json

    from torchtune_longshort.study.figures import curve_figure, finetune_curve_figure
    from torchtune_longshort.study.stages import train_summary

    rows = {"pi_a0_s0": [(1, 5.0, None), (2, 4.5, 4.8), (3, 9.0, 9.5), (3, 4.2, 4.6), (4, 4.0, 4.4)],
            "pi_a0_s1": [(1, 5.1, None), (2, 4.6, 4.9)]}
    recs = {}
    for key, steps in rows.items():
        d = tmp_path / key
        d.mkdir()
        lines = [json.dumps({"step": 0, "seed": 0})]
        for step, ce, val in steps:
            lines.append(json.dumps({"step": step, "ce": ce, "loss": ce, "misalignment": 0.0}))
            lines += [json.dumps({"step": step, "val_ce": val})] if val is not None else []
        (d / "metrics.jsonl").write_text("\n".join(lines) + "\n" + ('{"step": 5, "ce' if key == "pi_a0_s0" else ""))
        recs[key] = {"status": "ok", "train": train_summary(d), "curves": {"512": [6.0 + i / 1e3 for i in range(512)]}}
    resumed = recs["pi_a0_s0"]["train"]
    assert resumed["ce_curve"] == [(1, 5.0), (2, 4.5), (3, 4.2), (4, 4.0)] and resumed["steps"] == 4
    assert resumed["mean_last_4"]["ce"] == pytest.approx((5.0 + 4.5 + 4.2 + 4.0) / 4)
    assert recs["pi_a0_s1"]["train"]["steps"] == 2
    cfg = lengths_cfg([512], alphas=[0.0], seeds=[0, 1])
    ax = draw(finetune_curve_figure(cfg, recs)).axes[0]
    assert [(list(ln.get_xdata()), list(ln.get_ydata())) for ln in ax.lines] == [([2, 3, 4], [4.8, 4.6, 4.4]),
                                                                                 ([2], [4.9])]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == ["seed 0", "seed 1"]
    assert draw(curve_figure(cfg, recs, "512")).axes[0].get_xlabel() == "position (tokens)"


@pytest.mark.parametrize("steps", [range(25, 151, 25), range(10, 201, 10), range(1, 4)])
def test_convergence_figure_labels_its_first_and_last_step(steps):
    # docs/study/cpu_medium's finetune_convergence.png: held-out CE at steps 25 .. 150 under matplotlib's ticks
    # 20, 40, .., 140, neither the first step nor the last labelled; the reference: the steps the records hold
    from torchtune_longshort.study.figures import finetune_curve_figure

    cfg = lengths_cfg([512], alphas=[0.0], seeds=[0, 1])
    recs = {f"pi_a0_s{s}": {"status": "ok", "train": {"val_ce": [(n, 4.0 - n / 1e3 + s / 10) for n in steps]}}
            for s in (0, 1)}
    fig = draw(finetune_curve_figure(cfg, recs))
    ax = fig.axes[0]
    shown = [t for t in drawn_ticklabels(ax.xaxis) if t.get_text()]
    numbers = [int(t.get_text()) for t in shown]
    assert numbers[0] == min(steps) and numbers[-1] == max(steps), numbers
    assert numbers == sorted(set(numbers)) and all(min(steps) <= n <= max(steps) for n in numbers)
    no_overlap(shown, fig.canvas.get_renderer())


def test_a_metrics_line_that_is_not_json_before_the_last_is_named_as_the_recipe_names_it(tmp_path):
    # the study's reader of metrics.jsonl was a near-copy of the recipe's (JsonlMetricLogger on resume): a line
    # that is not JSON before the last ended the report in a bare JSONDecodeError ("Expecting value: line 1
    # column 1"), naming neither the file nor the line; both read it with training.metrics.metric_lines now
    from torchtune_longshort.study.stages import train_summary

    (tmp_path / "metrics.jsonl").write_text('{"step": 1, "ce": 2.0}\nnot json\n{"step": 2, "ce": 1.5}\n{"step": 3')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2: not a JSON line \('not json'\)"):
        train_summary(tmp_path)
