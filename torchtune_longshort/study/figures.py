"""The study report's figures of its tables (matplotlib ``Figure`` objects, no pyplot state): lines over length,
BABILong and passkey depth x length heatmaps, the CE-only fine-tunes' held-out CE by step, per-position loss; and
:func:`redraw_report`, which redraws a finished report's figures (these and the claims' figures,
:mod:`torchtune_longshort.study.claim_figures`) from the run records it holds.

Every figure reads right at its edges: value axes follow :func:`torchtune_longshort.plots.axes.value_axis` (one
rule, near-equal values included), coinciding lines stay visible (:func:`plot_axes.series_style`), a title says
"1 seed" rather than "mean ± sd" when there is one seed (:func:`~torchtune_longshort.study.labels.seeds_text`), and a
quick (smoke) study's figures say so (:func:`plot_axes.mark_quick`)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Dict, List, Optional

from torchtune_longshort._quiet import quiet_upstream
from torchtune_longshort.configs_cli import list_command, resolve_config
from torchtune_longshort.output_guard import atomic_write_json, read_json, save_figure
from torchtune_longshort.plots.axes import (LENGTH_LABEL, MISSING_GID, POSITION_LABEL, count_axis, length_axis,
                                            mark_quick, note_missing, position_axis, series_style, value_axis)
from torchtune_longshort.plots.panels import (fraction_text, heatmap_size, panel_row, wrap_columns, wrapped_panels,
                                              wrapped_title)
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.plots.available import matplotlib_problem
from torchtune_longshort.plots.not_drawn import positions_not_drawn
from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import ArgumentParser, fault_line, one_line, refusal, user_path
from torchtune_longshort.study.base_config import pypi_paths_only
from torchtune_longshort.study.claim_figures import claim_plots
from torchtune_longshort.study.claims import analyze
from torchtune_longshort.study.config import StudyConfig, StudyConfigError
from torchtune_longshort.study.eval_config import FAMILY_TASK, metric_of
from torchtune_longshort.study.eval_used import eval_used
from torchtune_longshort.study.labels import loss_label, missing_text, seeds_of_cells, seeds_text
from torchtune_longshort.study.load import load_study_config
from torchtune_longshort.study.records import eval_setting, members_scored, metric_value, why_empty
from torchtune_longshort.study.report_folder import (BABILONG_PLOT, CURVES_PLOT, FINETUNE_PLOT, MISALIGNMENT_PLOT,
                                                     PASSKEY_PLOT, PPL_PLOT, check_report_dir, finished_report)
from torchtune_longshort.study.tables import build_tables, read_records


LENGTH_MARKS_GID = "length_marks"  # the top axis that labels L0 and L


def _mark_lengths(ax, cfg: StudyConfig) -> None:
    """Dotted lines at L0 and L, labelled as ticks of a top axis: outside the frame, so no point, legend or edge of
    the plot covers them (drawn inside, "L" sat on the right edge over the base's last point and legends hid
    "L0"); matplotlib lifts the title above them."""
    from matplotlib.ticker import NullLocator

    for x in (cfg.L0, cfg.L):
        ax.axvline(x, color="grey", lw=0.8, ls=":")
    top = ax.secondary_xaxis("top")
    top.set_xticks([cfg.L0, cfg.L], ["L0", "L"], fontsize=8, color="grey")
    top.xaxis.set_minor_locator(NullLocator())
    top.tick_params(length=2, pad=1, color="grey")
    top.set_gid(LENGTH_MARKS_GID)


def _row_name(row: Dict[str, Any]) -> str:
    """A table row as a panel's note names it: ``alpha=0.1``, or ``base``."""
    return "base" if row["alpha"] is None else f"alpha={row['alpha']:g}"


def line_figure(cfg: StudyConfig, table: Dict[str, Any], lengths: List[int], ylabel: str):
    """One panel per method: the table's mean ± sd against length (a plain value at one seed), one line per loss
    row (a Figure).

    Lengths get one labelled tick each; the value axis is log only when the values span a decade, with plain
    tick labels and no offset text (:mod:`torchtune_longshort.plots.axes`). The title counts the seeds its
    points hold (a cell's ``n``), not the seeds planned. A cell with no value is named on the panel with the
    reason its table cell gives (``why_empty``: not run, failed, a length the text could not fill, ...)."""
    methods = list(table["methods"])
    fig, axes = panel_row(len(methods), (5, 4))
    for ax, m in zip(axes, methods):
        ys_all: List[float] = []
        counts: List[int] = []
        missing = []
        rows = table["methods"][m]
        for i, row in enumerate(rows):
            cells = [row["cells"][length_label(n)] for n in lengths]
            pts = [(x, c["mean"], c["sd"] or 0.0) for x, c in zip(lengths, cells) if c["mean"] is not None]
            counts += [c.get("n", 1) for c in cells if c["mean"] is not None]
            missing += [(_row_name(row), length_label(x), c.get("why_empty") or "no value")
                        for x, c in zip(lengths, cells) if c["mean"] is None]
            if pts:
                style = series_style(i, len(rows), len(lengths))
                if row["alpha"] is None:  # the base: a reference, not one of the compared losses
                    style["linestyle"] = (0, (5, 2))
                # a cell without a value between two with one breaks the line (NaN), never joined over
                line = [(x, c["mean"], c["sd"] or 0.0) if c["mean"] is not None else (x, math.nan, math.nan)
                        for x, c in zip(lengths, cells) if pts[0][0] <= x <= pts[-1][0]]
                ax.errorbar([p[0] for p in line], [p[1] for p in line], yerr=[p[2] for p in line], capsize=3,
                            label=row["label"] if row["alpha"] is not None else "base (reference)", **style)
                ys_all += [p[1] - p[2] for p in pts] + [p[1] + p[2] for p in pts]
        length_axis(ax, list(lengths) + [cfg.L0, cfg.L])
        value_axis(ax, ys_all)
        _mark_lengths(ax, cfg)
        ax.set_xlabel(LENGTH_LABEL)
        ax.set_ylabel(ylabel)
        ax.set_title(f"{m}: {seeds_of_cells(counts)}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        note_missing(ax, missing_text(missing, [_row_name(r) for r in rows], [length_label(n) for n in lengths]),
                     4.6)
    mark_quick(fig, cfg.quick)
    return fig


def _cell_word(why: str) -> str:
    """The word an empty heatmap cell shows (the reason itself goes under the figure)."""
    return "not run" if why == "not run" else "failed" if why.startswith("run failed") else "n/a"


def depth_length_figure(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]], lengths: List[Any], depths: List[int],
                        cell, count, task: str, label: str, chance: Optional[float] = None,
                        chance_text: str = ""):
    """A depth x length heatmap per method x alpha of the main grid (a Figure): ``cell(rec, length, depth)`` is one
    run's score or None, averaged over seeds; ``count(rec, length, depth)`` the prompts that score averages, so
    that every cell states its ``n`` (prompts over its seeds: ``1.00`` from one prompt is not ``1.00`` from 30),
    and the title what one run's n is. An empty cell says ``not run``, ``failed`` or ``n/a (k)``,
    note k under the figure giving the reason (:func:`~torchtune_longshort.study.records.why_empty` for
    ``task``). Depth labels on the first column and length labels on the last row only, so that no label runs into
    a neighbour's; a single length or depth keeps readable cells and titles.

    ``chance``: the score of guessing (drawn as a red line on the colour bar, named in its label and in the title
    with ``chance_text``, e.g. "random digits"); None when the task has no meaningful chance level."""
    from matplotlib.figure import Figure

    combos = [(m, a) for m in cfg.methods for a in cfg.alphas]
    w, h = heatmap_size(len(lengths), len(depths), cell=(0.9, 0.55), extra=(1.0, 1.0), min_size=(2.2, 2.0))
    cols = wrap_columns(len(cfg.alphas), w, extra=1.6)
    width = w * cols + 1.6
    fig = Figure(figsize=(width, h * len(cfg.methods) * math.ceil(len(cfg.alphas) / cols) + 1.0),
                 layout="constrained")
    panels = wrapped_panels(fig, len(cfg.methods), len(cfg.alphas), cols)
    im, notes, seeds, per_run = None, [], [], set()
    labs = [n if isinstance(n, str) else length_label(n) for n in lengths]
    for (m, a), (ax, show_x, show_y) in zip(combos, panels):
        members = [r.key for r in cfg.runs_of(m, a)]
        keys = [k for k in members if recs[k].get("status") == "ok"]
        grid_v, texts = [], []
        for d in depths:
            row, trow = [], []
            for n, lab in zip(lengths, labs):
                got = [(v, count(recs[k], n, d)) for k in keys
                       if (v := cell(recs[k], n, d)) is not None and math.isfinite(v)]
                if got:
                    seeds.append(len(got))
                    per_run |= {c for _, c in got}
                    row.append(statistics.fmean(v for v, _ in got))
                    trow.append(f"{fraction_text(row[-1])}\nn={sum(c for _, c in got)}")
                else:
                    why = why_empty(recs, members, task, lab)
                    notes += [why] if why not in notes and _cell_word(why) == "n/a" else []
                    row.append(float("nan"))
                    trow.append(_cell_word(why) + (f" ({notes.index(why) + 1})" if why in notes else ""))
            grid_v.append(row)
            texts.append(trow)
        im = ax.imshow(grid_v, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_facecolor("0.93")  # an empty cell is light grey, its word dark: never white on white
        ax.set_xticks(range(len(lengths)), labs if show_x else [])
        ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths] if show_y else [])
        ax.set_xlabel(LENGTH_LABEL if show_x else "")
        ax.set_ylabel("depth" if show_y else "")
        for i, (row, trow) in enumerate(zip(grid_v, texts)):
            for j, (v, t) in enumerate(zip(row, trow)):
                ax.text(j, i, t, ha="center", va="center", fontsize=7, linespacing=1.1,
                        color="0.25" if math.isnan(v) else "w" if v < 0.6 else "k",
                        gid=MISSING_GID if math.isnan(v) else None)
        ax.set_title(f"{m}, alpha={a:g}", fontsize=9)
    cbar = fig.colorbar(im, ax=[ax for ax, _, _ in panels], shrink=0.8,
                        label=label + (f"\n(red line: chance {chance:g})" if chance is not None else ""))
    runs_n = sorted(per_run)
    per = "" if not runs_n else f" ({runs_n[0]}{'' if len(runs_n) == 1 else f'-{runs_n[-1]}'} per run)"
    title = f"{label}; n = prompts per cell{per}, {seeds_of_cells(seeds).replace(' ± sd', '')}"
    if chance is not None:
        cbar.ax.axhline(chance, color="red", lw=2.5)
        title += f"; chance level ({chance_text}) {chance:g}" if chance_text else f"; chance level {chance:g}"
    fig.suptitle(wrapped_title(title, width, fontsize=10), fontsize=10)
    if notes:
        fig.supxlabel(wrapped_title("n/a: the runs succeeded but gave no value here: " + "; ".join(
            f"({i}) {r}" for i, r in enumerate(notes, 1)), width, fontsize=7), fontsize=7, color="0.25")
    mark_quick(fig, cfg.quick)
    return fig


def babilong_figure(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]):
    """BABILong depth x length: mean over seeds and QA tasks of ``acc_<len>_d<depth>`` (fact depth); a cell's n
    counts the prompts of the QA tasks that scored there (``n`` per task, length and depth). No chance line: the
    answers are free-form words, so guessing has no fixed score."""
    bab = cfg.eval.babilong
    task = metric_of("babilong", bab.lengths[0])[0]

    def count(rec, lab, d):  # prompts per QA task (as the run was set up) x the QA tasks that scored there
        used = eval_setting(rec, "babilong", {}) or {}
        n_qa = len([q for q in str(used.get("qa", bab.qa)).split(",") if q.strip()])
        return int(used.get("n", bab.n)) * (members_scored(rec, *metric_of("babilong", lab, depth=d)) or n_qa)

    return depth_length_figure(cfg, recs, bab.lengths, bab.depths,
                               lambda rec, lab, d: metric_value(rec, *metric_of("babilong", lab, depth=d)), count,
                               task, "BABILong accuracy")


def passkey_figure(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]):
    """Passkey depth x length: mean over seeds of the digits in place, ``digits_<len>_d<depth>`` (key depth), with
    the score of random digits (:data:`torchtune_longshort.eval.tasks.passkey.task.DIGITS_CHANCE`) marked; a cell's
    n is ``passkey_num_samples`` per run (as the run was set up)."""
    # deferred: lm_eval (the passkey task module is built on lm-eval's task classes; only this figure needs it)
    from torchtune_longshort.eval.tasks.passkey.task import DIGITS_CHANCE, depths_of

    ev = cfg.eval
    depths = depths_of({"passkey_depths": ev.metadata_value("passkey_depths", None)})
    return depth_length_figure(cfg, recs, ev.passkey_lengths, depths,
                               lambda rec, n, d: metric_value(rec, *metric_of("passkey_digits", n, depth=d)),
                               lambda rec, n, d: int(eval_setting(rec, "passkey_num_samples", ev.passkey_num_samples)),
                               FAMILY_TASK["passkey"], "passkey digits in place", chance=DIGITS_CHANCE,
                               chance_text="random digits")


def finetune_curve_figure(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]):
    """Held-out CE against step of every CE-only fine-tune (alpha = 0), one line per seed, a panel per method:
    whether the fine-tuning budget let cross-entropy converge (a Figure)."""
    methods = list(cfg.methods)
    fig, axes = panel_row(len(methods), (4.5, 3.6), sharey=True)
    ys_all: List[float] = []
    for ax, m in zip(axes, methods):
        runs = [(r, val) for r in cfg.runs_of(m, 0.0)
                if (val := ((recs.get(r.key) or {}).get("train") or {}).get("val_ce"))]
        for i, (r, val) in enumerate(runs):
            ax.plot([s for s, _ in val], [v for _, v in val], label=f"seed {r.seed}",
                    **series_style(i, len(runs), len(val)))
            ys_all += [v for _, v in val]
        steps = [int(s) for _, val in runs for s, _ in val]
        if steps:  # the first and the last evaluated step labelled (matplotlib's own ticks: 20 .. 140 of 25 .. 150)
            count_axis(ax, min(steps), max(steps))
        ax.set_xlabel("fine-tuning step")
        ax.set_title(f"{m}: CE-only, held-out CE at L = {cfg.L}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    value_axis(axes[0], ys_all)  # the panels share it
    for ax in axes:
        ax.set_ylabel("held-out CE (nats)" if ax.get_subplotspec().is_first_col() else "")
    mark_quick(fig, cfg.quick)
    return fig


def curve_figure(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]], longest: str):
    """Per-position mean NLL at the longest ppl length, mean over seeds, one line per alpha (a Figure)."""
    methods = list(cfg.methods)
    fig, axes = panel_row(len(methods), (5, 4))
    for ax, m in zip(axes, methods):
        ys_all: List[float] = []
        last = 0
        for k, a in enumerate(cfg.alphas):
            curves = [recs[r.key]["curves"][longest] for r in cfg.runs_of(m, a)
                      if recs[r.key].get("status") == "ok" and longest in (recs[r.key].get("curves") or {})]
            if curves:
                n = min(map(len, curves))
                ys = [statistics.fmean(c[i] for c in curves) for i in range(n)]
                w = max(1, n // 64)  # smooth over w positions so the lines can be told apart
                ys_s = [statistics.fmean(ys[i:i + w]) for i in range(0, n, w)]
                ax.plot([i + w / 2 for i in range(0, n, w)], ys_s, label=loss_label(a) + positions_not_drawn(ys),
                        **series_style(k, len(cfg.alphas), len(ys_s)))
                ys_all += ys_s
                last = max(last, n - 1)
        value_axis(ax, ys_all, log_span=float("inf"))
        if last:  # the first and the last position labelled (matplotlib's own: 0 .. 2000 of 0 .. 2047)
            position_axis(ax, 0, last)
        _mark_lengths(ax, cfg)
        ax.set_xlabel(POSITION_LABEL)
        ax.set_ylabel("mean NLL (nats)")
        ax.set_title(f"{m}: per-position loss at {longest} tokens, {seeds_text(len(cfg.seeds), spread=False)}",
                     fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    mark_quick(fig, cfg.quick)
    return fig


def write_plots(cfg: StudyConfig, tables: Dict[str, Any], recs: Dict[str, Dict[str, Any]], rdir: Path) -> List[str]:
    """Save every figure the tables and records support under ``rdir``; returns the file names."""
    made = []
    ev = cfg.eval
    for tid, field, ylabel, name in (("ppl", "ppl_lengths", "perplexity", PPL_PLOT),
                                     ("misalignment", "misalignment_lengths", "misalignment (SCE, Eq. 4)",
                                      MISALIGNMENT_PLOT)):
        if tables.get(tid):
            save_figure(line_figure(cfg, tables[tid], getattr(ev, field), ylabel), rdir / name, dpi=110)
            made.append(name)
    if ev.babilong_lengths and ev.babilong.depths:
        save_figure(babilong_figure(cfg, recs), rdir / BABILONG_PLOT, dpi=110)
        made.append(BABILONG_PLOT)
    if ev.passkey_lengths and any(FAMILY_TASK["passkey"] in (r.get("results") or {}) for r in recs.values()):
        save_figure(passkey_figure(cfg, recs), rdir / PASSKEY_PLOT, dpi=110)
        made.append(PASSKEY_PLOT)
    if any((r.get("train") or {}).get("val_ce") for k, r in recs.items() if k != "base"):
        save_figure(finetune_curve_figure(cfg, recs), rdir / FINETUNE_PLOT, dpi=110)
        made.append(FINETUNE_PLOT)
    longest = str(max(ev.ppl_lengths))
    if any(longest in (r.get("curves") or {}) for r in recs.values()):
        save_figure(curve_figure(cfg, recs, longest), rdir / CURVES_PLOT, dpi=110)
        made.append(CURVES_PLOT)
    return made


def redraw_report(cfg: StudyConfig, report_dir: Path) -> List[str]:
    """Redraw every figure of a finished report folder from the run records it holds (``runs/<key>/result.json``,
    the base's in ``runs/base``), as :func:`torchtune_longshort.study.report.build_report` draws them, leaving
    report.md and the records untouched; returns the file names written. A PNG there named like a plot that
    ``summary.json`` does not list (a user's own) is refused before anything is drawn, as the study's report
    refuses it (:func:`~torchtune_longshort.study.report_folder.check_report_dir`); a plot drawn that the report
    did not list is added to ``summary.json``'s ``plots``, so the folder's next redraw or report takes it as its own.

    ``python -m torchtune_longshort.study.figures --config study/<name>.yaml --report docs/study/<name>``:
    a change to these figures reaches a committed report without re-running or re-writing it."""
    rdir = Path(report_dir)
    if not finished_report(rdir):  # a report cut off part-way lacks runs: its figures would be drawn without them
        raise ValueError(f"--report={str(rdir)!r} holds no finished study report (its summary.json, written last, "
                         "is missing or unreadable): build the report first (the study command with --report-only)")
    check_report_dir(rdir, "--report")
    recs = read_records(cfg, lambda key: rdir / "runs" / key)  # the report's copies: the base's in runs/base too
    cfg = eval_used(cfg, recs)[0]  # labelled by what the runs used
    analysis = analyze(cfg, recs)
    if any(r.get("status") == "ok" for k, r in recs.items() if k != "base"):
        made = write_plots(cfg, build_tables(cfg, recs), recs, rdir) + claim_plots(cfg, analysis, recs, rdir)
    else:
        made = claim_plots(cfg, analysis, recs, rdir, base_only=True)
    summary = read_json(rdir / "summary.json")
    listed = [p for p in summary.get("plots") or [] if isinstance(p, str)]
    if [p for p in made if p not in listed]:
        atomic_write_json(rdir / "summary.json", {**summary, "plots": listed + [p for p in made if p not in listed]},
                          indent=1, default=str)
    return made


def main(argv=None) -> int:
    """``python -m torchtune_longshort.study.figures --config CONFIG --report DIR [--quick] [--methods M,...]``:
    :func:`redraw_report`; exit 2, in one line, on a config or ``--methods`` it refuses."""
    import dataclasses

    prog = "python -m torchtune_longshort.study.figures"
    p = ArgumentParser(prog=prog, description="Redraw a study report's figures from the run records in its folder.")
    p.add_argument("--config", required=True, help="the study YAML the report was made with: a file, or a shipped "
                   f"one by its `{list_command()}` name (study/cpu_small.yaml), as the study command takes it")
    p.add_argument("--report", required=True, type=user_path,
                   help="the report folder (report.md, runs/<key>/result.json)")
    p.add_argument("--quick", action="store_true", help="the report is of the config's --quick variant")
    p.add_argument("--methods", default=None, help="comma list: draw only these of the config's methods (a report "
                   "made before the config gained the others; default: all of them)")
    p.add_argument("--repo-root", default=".", type=user_path,
                   help="folder the config's relative paths are read from (default: the working directory)")
    a = p.parse_args(argv)
    no_plots = matplotlib_problem()
    if no_plots:  # all this command does is draw
        return refusal(prog, f"{no_plots} and rerun")
    quiet_upstream()  # before the config check imports torchtune (torchao's line), as the study's entry point
    root = Path(a.repo_root).resolve()
    try:
        with pypi_paths_only():  # a redraw reads the report's records, never the base model
            cfg = load_study_config(resolve_config(a.config, root, "--config"), quick=a.quick, repo_root=root)
    except (StudyConfigError, FileNotFoundError, ValueError) as e:
        return refusal(prog, one_line(e))
    if a.methods:
        keep = [m.strip() for m in a.methods.split(",") if m.strip()]
        unknown = [m for m in keep if m not in cfg.methods]
        if unknown or not keep:
            return refusal(prog, f"--methods={a.methods!r}: {unknown or 'empty'} not in the config's methods "
                                 f"{sorted(cfg.methods)}; name some of those")
        cfg = dataclasses.replace(cfg, methods={m: cfg.methods[m] for m in keep})
    try:
        made = redraw_report(cfg, Path(a.report))
    except Exception as e:  # a report that is not one, a record cut off, a full disk: one line
        line = fault_line(e)
        if line is None:
            raise
        return refusal(prog, line)
    print(f"redrew {counted(len(made), 'figure')} in {a.report}: {', '.join(made)}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
