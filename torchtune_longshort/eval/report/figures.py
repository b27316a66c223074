"""The evaluation report's figures: depth x length accuracy heatmaps, perplexity against length and the
per-position loss curve of ``longshort_ppl``."""

from __future__ import annotations

import csv
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torchtune_longshort.output_guard import atomic_open, save_figure
from torchtune_longshort.plots.axes import (
    LENGTH_LABEL, LINESTYLES, MISSING_GID, POSITION_LABEL, length_axis, note_missing, position_axis, series_style,
    value_axis,
)
from torchtune_longshort.plots.panels import fraction_text, heatmap_size, wrapped_title
from torchtune_longshort.plots.not_drawn import positions_not_drawn
from torchtune_longshort.eval.report.results_io import CELL_METRIC, metric_length
from torchtune_longshort.eval.tasks import TASK_FAMILIES
from torchtune_longshort.eval.tasks.common.lengths import length_label, parse_length

PPL_TASK = TASK_FAMILIES["ppl"].task


def heatmaps(runs: Dict[str, Dict[str, Dict[str, Any]]]
             ) -> Dict[Tuple[str, str, str], Dict[Tuple[int, str], Dict[int, float]]]:
    """``{(task, run, metric): {(length, length_label): {depth: value}}}`` from every ``<metric>_<length>_d<depth>``
    metric (:data:`CELL_METRIC`: ``acc`` of ``longshort_passkey`` and BABILong's fact-depth variant, passkey's
    ``digits``)."""
    out: Dict[Tuple[str, str, str], Dict[Tuple[int, str], Dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    for run, res in runs.items():
        for task, metrics in res.items():
            for m, v in metrics.items():
                mm = CELL_METRIC.match(m)
                if mm and parse_length(mm["length"]) is not None and isinstance(v, (int, float)):
                    lab = mm["length"]
                    out[(task, run, mm["metric"])][(parse_length(lab), lab)][int(mm["depth"])] = float(v)
    return out


def heatmap_figure(grid: Dict[Tuple[int, str], Dict[int, float]], title: str,
                   counts: Optional[Mapping[Tuple[str, int], int]] = None, label: str = "accuracy"):
    """Depth x length heatmap of a fraction in [0, 1] (``{(length_tokens, label): {depth: value}}``; ``label``: what
    it is, the colour bar's name) as a matplotlib Figure.

    ``counts`` (``{(length label, depth): n}``, :func:`results_io.load_cell_counts`): every cell states the n
    samples its value averages (``1.00`` from one sample is not ``1.00`` from fifty); without counts (lm-eval run
    without ``--log_samples``) the title says n is not known. One row or one column keeps readable cells
    (:func:`~torchtune_longshort.plots.panels.heatmap_size`) and the title is wrapped to the figure's width, so
    neither is squeezed nor clipped."""
    from matplotlib.figure import Figure

    lengths = sorted(grid)
    depths = sorted({d for row in grid.values() for d in row})
    data = [[grid[L].get(d, float("nan")) for L in lengths] for d in depths]
    size = heatmap_size(len(lengths), len(depths), cell=(0.9, 0.55))
    fig = Figure(figsize=size, layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(data, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    ax.set_facecolor("0.88")  # a cell without a value is grey with its word, never white under a pale one
    ax.set_xticks(range(len(lengths)), [lab for _, lab in lengths])
    ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths])
    ax.set_xlabel(LENGTH_LABEL)
    ax.set_ylabel("depth")
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            if math.isnan(v):  # scored NaN (its reason is in the report), or a depth not run at this length
                word = "n/a" if depths[i] in grid[lengths[j]] else "—"
                ax.text(j, i, word, ha="center", va="center", fontsize=7, color="0.25", gid=MISSING_GID)
                continue
            n = (counts or {}).get((lengths[j][1], depths[i]))
            ax.text(j, i, fraction_text(v) + (f"\nn={n}" if n is not None else ""), ha="center", va="center",
                    fontsize=7, linespacing=1.1, color=text_colour(im.cmap(im.norm(v))))
    if not counts:
        title += " (n per cell not known: run lm-eval with --log_samples to count it)"
    fig.suptitle(wrapped_title(title, size[0]), fontsize=9)
    fig.colorbar(im, ax=ax, label=label)
    return fig


def text_colour(rgba) -> str:
    """Black or white, whichever reads better on a cell of colour ``rgba`` (WCAG 2.0's relative luminance L: white
    where 1.05 / (L + 0.05) beats (L + 0.05) / 0.05, i.e. below L = sqrt(1.05 * 0.05) - 0.05 = 0.17913, where the
    two contrast ratios are equal): black on RdYlGn's dark red (0.00) and dark green (1.00) read at about 2.6:1 and
    3.2:1."""
    def channel(c: float) -> float:
        return c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4

    r, g, b = (channel(c) for c in rgba[:3])
    lum = 0.2126 * r + 0.7152 * g + 0.0722 * b
    return "w" if 1.05 / (lum + 0.05) > (lum + 0.05) / 0.05 else "k"


def ppl_points(metrics: Dict[str, Any]) -> List[Tuple[int, float]]:
    """``(length, perplexity)`` of one run's ``longshort_ppl`` results (its ``ppl_<length>`` metrics), finite values
    only, by length."""
    pts = [(metric_length(k, "ppl"), v) for k, v in metrics.items() if isinstance(v, (int, float))]
    return sorted((n, float(v)) for n, v in pts if n is not None and math.isfinite(v))


def ppl_figure(runs: Dict[str, Dict[str, Dict[str, Any]]]):
    """Perplexity against length, one line per run (None when no run has a ``longshort_ppl`` value).

    Lengths get one labelled tick each; perplexity goes on a log axis only when it spans a decade
    (:func:`plot_axes.value_axis`), with plain-number tick labels and no offset, and near-equal values do not fill
    the axis. Runs with equal numbers stay visible (:func:`plot_axes.series_style`)."""
    from matplotlib.figure import Figure

    xs, ys = [], []
    points = {run: ppl_points(res.get(PPL_TASK, {})) for run, res in runs.items()}
    undrawn = [run for run, pts in points.items() if not pts and PPL_TASK in runs[run]]
    asked_by = {run: {metric_length(k, "ppl") for k in res.get(PPL_TASK, {})} - {None} for run, res in runs.items()}
    asked = set().union(*asked_by.values())
    unscored = sorted(asked - {n for pts in points.values() for n, _ in pts})  # NaN in every run: no point at all
    points = {run: pts for run, pts in points.items() if pts}
    # a length one run scored NaN (others scored it): a break in that run's line, named, never joined over
    gaps = {run: sorted(asked_by[run] - {n for n, _ in pts} - set(unscored)) for run, pts in points.items()}
    # many runs, or long labels (folder names): the legend goes under the axes, in columns, never over the lines
    outside = len(points) > 6 or max((len(r) for r in points), default=0) > 24
    ncols = legend_columns([short_label(r) for r in points], 6.0)
    fig = Figure(figsize=(6, 4 + (0.22 * math.ceil(len(points) / ncols) if outside else 0)), layout="constrained")
    ax = fig.subplots()
    for i, (run, pts) in enumerate(points.items()):
        line = sorted(pts + [(n, float("nan")) for n in gaps[run]])
        ax.plot([x for x, _ in line], [y for _, y in line], label=short_label(run),
                **series_style(i, len(points), len(line)))
        xs += [x for x, _ in pts]
        ys += [y for _, y in pts]
    if not xs:
        return None
    length_axis(ax, xs)
    value_axis(ax, ys)
    ax.set_xlabel(LENGTH_LABEL)
    ax.set_ylabel("perplexity")
    ax.set_title("Perplexity by sequence length")
    legend = (fig.legend(loc="outside lower center", ncols=ncols, fontsize=7) if outside else ax.legend(fontsize=8))
    ax.grid(alpha=0.3)
    missing = ([f"not drawn (no finite perplexity): {', '.join(undrawn)}"] if undrawn else []) + (
        [f"not scored by any run: {', '.join(length_label(n) for n in unscored)} tokens"] if unscored else []) + (
        [f"no finite perplexity at {', '.join(length_label(n) for n in g)} tokens: {run} (its line breaks there)"
         for run, g in gaps.items() if g])
    if missing:  # a run, or a length, without a finite perplexity is named, not left out without a word
        note_missing(ax, f"{'; '.join(missing)} (reasons in the report)", 6, below=legend if outside else None)
    return fig


def legend_columns(labels: Sequence[str], width_in: float, fontsize: float = 7.0, most: int = 2) -> int:
    """Columns (at most ``most``) of a legend of ``labels`` under the axes that keep it within ``width_in`` inches:
    two columns of 48-character labels ran off both sides of a 6-inch figure."""
    entry = 0.6 + 0.6 * fontsize / 72 * max((len(t) for t in labels), default=0)  # handle + text, inches
    return max(1, min(most, len(labels), int(width_in // entry)))


def short_label(label: str, most: int = 48) -> str:
    """``label`` cut in its middle to at most ``most`` characters (a run folder's name keeps its start and end)."""
    if len(label) <= most:
        return label
    head = (most - 1) // 2
    return label[:head] + "…" + label[len(label) - (most - 1 - head):]


def curves_figure(curves: Mapping[str, Mapping[int, Sequence[float]]], bucket: int = 0):
    """Per-position mean NLL, one line per run and length (see :func:`write_curves`), as a matplotlib Figure;
    plain-number NLL ticks without an offset (:func:`plot_axes.value_axis`). A line whose points average more than
    one position says how many in its legend entry."""
    from matplotlib.figure import Figure

    entries = [(run, length, curve) for run, by_len in curves.items() for length, curve in sorted(by_len.items())]
    labels = []
    for run, length, curve in entries:
        b = bucket or max(1, len(curve) // 200)
        # each curve gets its own bucket (about 200 points): say it, or a 1k curve's 5-position means read as
        # a smoother loss than a 256 curve's single positions beside it
        labels.append(f"{short_label(run)} L={length}" + (f" (means of {b} positions)" if b > 1 else "")
                      + positions_not_drawn(curve))  # a NaN position was dropped without a word
    # many curves, or long labels (run folders): the legend goes under the axes, never over the curves
    outside = len(entries) > 6 or max((len(t) for t in labels), default=0) > 40
    ncols = legend_columns(labels, 7.0)
    fig = Figure(figsize=(7, 4 + (0.2 * math.ceil(len(entries) / ncols) if outside else 0)), layout="constrained")
    ax = fig.subplots()
    ys_all: List[float] = []
    for k, ((run, length, curve), label) in enumerate(zip(entries, labels)):
        b = bucket or max(1, len(curve) // 200)
        # a point at the centre of the positions it averages (the last bucket may be shorter)
        xs = [(i + min(i + b, len(curve)) - 1) / 2 for i in range(0, len(curve), b)]
        ys = [sum(curve[i : i + b]) / len(curve[i : i + b]) for i in range(0, len(curve), b)]
        # past ten curves the colours repeat: the line style tells them apart
        ax.plot(xs, ys, label=label, color=f"C{k % 10}", linestyle=LINESTYLES[(k // 10) % len(LINESTYLES)])
        ys_all += ys
    value_axis(ax, ys_all, log_span=float("inf"))
    if entries:  # the first and the last position labelled (matplotlib's own: 0 .. 1000 of 0 .. 1023)
        position_axis(ax, 0, max(len(curve) for _, _, curve in entries) - 1)
    ax.set_xlabel(POSITION_LABEL)
    ax.set_ylabel("mean NLL (nats)")
    ax.set_title("Per-position loss")
    if ys_all:
        fig.legend(loc="outside lower center", ncols=ncols, fontsize=7) if outside else ax.legend(fontsize=7)
    return fig


def write_curves(curves: Mapping[str, Mapping[int, Sequence[float]]], out_dir: Path, bucket: int = 0,
                 png: bool = True) -> Dict[str, Path]:
    """Write per-position loss curves: ``per_position_loss.csv`` (run, length, position, mean_nll) and a PNG.

    Args:
        curves: ``{run label: {length: per-position mean NLL}}``.
        bucket: average this many positions per plotted point (0: about 200 points per curve).
        png: draw the PNG too (False: matplotlib cannot be imported; the CSV alone)
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    csv_path = out_dir / "per_position_loss.csv"
    with atomic_open(csv_path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["run", "length", "position", "mean_nll"])
        for run, by_len in curves.items():
            for length, curve in sorted(by_len.items()):
                for pos, v in enumerate(curve):
                    w.writerow([run, length, pos, f"{v:.6f}"])
    if not png:
        return {"csv": csv_path}
    png_path = out_dir / "per_position_loss.png"
    save_figure(curves_figure(curves, bucket), png_path, dpi=120)
    return {"csv": csv_path, "png": png_path}
