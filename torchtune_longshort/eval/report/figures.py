"""The evaluation report's figures: depth x length accuracy heatmaps and perplexity against length."""

from __future__ import annotations

import math
import re
from collections import defaultdict
from typing import Any, Dict, List, Tuple

from torchtune_longshort.eval.lengths import parse_length
from torchtune_longshort.eval.results_io import metric_length

PPL_TASK = "long_ppl"


def heatmaps(runs: Dict[str, Dict[str, Dict[str, Any]]]) -> Dict[Tuple[str, str], Dict[Tuple[int, str], Dict[int, float]]]:
    """``{(task, run): {(length, length_label): {depth: acc}}}`` from every ``acc_<length>_d<depth>`` metric
    (``longshort_passkey``, BABILong's fact-depth variant)."""
    out: Dict[Tuple[str, str], Dict[Tuple[int, str], Dict[int, float]]] = defaultdict(lambda: defaultdict(dict))
    pat = re.compile(r"^acc_(\w+?)_d(\d+)$")
    for run, res in runs.items():
        for task, metrics in res.items():
            for m, v in metrics.items():
                mm = pat.match(m)
                if mm and parse_length(mm.group(1)) is not None and isinstance(v, (int, float)):
                    lab = mm.group(1)
                    out[(task, run)][(parse_length(lab), lab)][int(mm.group(2))] = float(v)
    return out


def heatmap_figure(grid: Dict[Tuple[int, str], Dict[int, float]], title: str):
    """Depth x length accuracy heatmap (``{(length_tokens, label): {depth: acc}}``) as a matplotlib Figure.

    One row or one column keeps readable cells (:func:`plot_axes.heatmap_size`) and the title is wrapped to the
    figure's width, so neither is squeezed nor clipped."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import heatmap_size, wrapped_title

    lengths = sorted(grid)
    depths = sorted({d for row in grid.values() for d in row})
    data = [[grid[L].get(d, float("nan")) for L in lengths] for d in depths]
    size = heatmap_size(len(lengths), len(depths))
    fig = Figure(figsize=size, layout="constrained")
    ax = fig.subplots()
    im = ax.imshow(data, vmin=0, vmax=1, cmap="RdYlGn", aspect="auto")
    ax.set_xticks(range(len(lengths)), [lab for _, lab in lengths])
    ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths])
    ax.set_xlabel("context length")
    ax.set_ylabel("depth")
    for i, row in enumerate(data):
        for j, v in enumerate(row):
            if not math.isnan(v):
                ax.text(j, i, f"{v:.2f}", ha="center", va="center", fontsize=7)
    fig.suptitle(wrapped_title(title, size[0]), fontsize=9)
    fig.colorbar(im, ax=ax, label="accuracy")
    return fig


def ppl_points(metrics: Dict[str, Any]) -> List[Tuple[int, float]]:
    """``(length, perplexity)`` of one run's ``long_ppl`` results (its ``ppl_<length>`` metrics), finite values
    only, by length."""
    pts = [(metric_length(k, "ppl"), v) for k, v in metrics.items() if isinstance(v, (int, float))]
    return sorted((n, float(v)) for n, v in pts if n is not None and math.isfinite(v))


def ppl_figure(runs: Dict[str, Dict[str, Dict[str, Any]]]):
    """Perplexity against length, one line per run (None when no run has a ``long_ppl`` value).

    Lengths get one labelled tick each; perplexity goes on a log axis only when it spans a decade
    (:func:`plot_axes.value_axis`), with plain-number tick labels and no offset, and near-equal values do not fill
    the axis. Runs with equal numbers stay visible (:func:`plot_axes.series_style`)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import length_axis, series_style, value_axis

    fig = Figure(figsize=(6, 4), layout="constrained")
    ax = fig.subplots()
    xs, ys = [], []
    points = {run: ppl_points(res.get(PPL_TASK, {})) for run, res in runs.items()}
    points = {run: pts for run, pts in points.items() if pts}
    for i, (run, pts) in enumerate(points.items()):
        ax.plot([x for x, _ in pts], [y for _, y in pts], label=run, **series_style(i, len(points), len(pts)))
        xs += [x for x, _ in pts]
        ys += [y for _, y in pts]
    if not xs:
        return None
    length_axis(ax, xs)
    value_axis(ax, ys)
    ax.set_xlabel("sequence length (tokens)")
    ax.set_ylabel("perplexity")
    ax.legend()
    ax.grid(alpha=0.3)
    return fig
