"""The paper's synthetic figures drawn from their curves (matplotlib ``Figure`` objects, no pyplot state): Fig. 1a/1b/
1c, 4, 5, 6 (:func:`paper_figure`) and the App. C.1 theory check (:func:`theory_figure`); the sparsity probes'
figures share :func:`mark_l_train` and :func:`legend_outside`.

Every figure says what each mark is: the shaded band is named in the legend (min..max over the seeds, with their
number), each training-length line is labelled with its ``l_train`` (on a top axis, so the label crosses no curve),
and the legend sits outside the axes, so it covers no line. The theory figure draws the length and sum tasks each on
its own value axis, the sum task's linear from 0, so that its two closed forms ((l+1)/(4l) against (l+1)/(2l), a
factor of about 2) are told apart at a glance; the mean task's error (float32 zero, 1e-15) is stated, not drawn on
an axis it would stretch over 20 decades.
"""

from __future__ import annotations

from typing import Dict, List, Optional, Sequence

import numpy as np

from torchtune_longshort.plots.axes import below_x_axis, count_axis, mark_quick, series_style, value_axis
from torchtune_longshort.plural import counted
from torchtune_longshort.synthetic.theory import length_error_closed_form, sum_error_closed_form

FIGURE_TITLES = {
    "1a": "Fig. 1a: mean task, by positional encoding",
    "1b": "Fig. 1b: length task, by positional encoding",
    "1c": "Fig. 1c: length task (NoPE), by OutRep f",
    "4": "Fig. 4: length task (NoPE), by l_train",
    "5": "Fig. 5: sum task (NoPE), with / without OutRep",
    "6": "Fig. 6: App. G bits (#ones ~ U[0, l]), NoPE",
    "theory": "App. C.1 linear attention vs closed forms",
}
# A squared error this small on targets in [0, 1] is float32 rounding (eps 6e-8, squared ~4e-15), i.e. zero
FLOAT32_ZERO_MSE = 1e-12
# The largest test MSE a figure draws: past it a value is an overflow (matplotlib's log axis cannot tick 270 decades)
DRAWN_AT_MOST = 1e100
# The ``gid`` of the top axis that labels the training-length lines (tests and readers find it by it).
L_TRAIN_GID = "l_train_label"


def _curve(ax, i: int, n: int, label: str, x: np.ndarray, mse: Sequence[np.ndarray]) -> None:
    """One curve: the seed mean, and a min..max band over the seeds when there are several. A length where a seed
    has no finite value (a prediction that overflowed), or one past :data:`DRAWN_AT_MOST`, is NaN in both: not
    drawn, and said in the legend (:func:`non_finite_said`); inf, or 1e267 (an OutRep inverse's ``expm1`` of a large
    value), ended matplotlib's log-axis ticks with an OverflowError after every run had trained."""
    a = np.array(mse, dtype=float)
    a[:, ~(np.abs(a) <= DRAWN_AT_MOST).all(0)] = np.nan
    style = series_style(i, n, len(x))
    ax.plot(x, a.mean(0), label=label, **style)
    if len(a) > 1:
        ax.fill_between(x, a.min(0), a.max(0), color=style["color"], alpha=0.15, lw=0)


def mark_l_train(ax, l_trains: Sequence[int]) -> None:
    """A dotted line at each training length, its value a tick of a second x axis on top of the axes (labelled
    ``l_train``), where no curve runs through it."""
    from matplotlib.ticker import FixedFormatter, FixedLocator

    lts = sorted(set(l_trains))
    for lt in lts:
        ax.axvline(lt, color="grey", ls=":", lw=0.8)
    top = ax.secondary_xaxis("top")
    top.xaxis.set_major_locator(FixedLocator(lts))
    top.xaxis.set_major_formatter(FixedFormatter([str(lt) for lt in lts]))
    top.tick_params(labelsize=7, colors="dimgrey", length=3)
    top.set_xlabel("l_train (dotted): longest training length", fontsize=7, color="dimgrey")
    top.set_gid(L_TRAIN_GID)


def legend_outside(ax, n_seeds: int = 1, chance: Optional[float] = None, loc: str = "right") -> None:
    """The axes' legend outside it (right of it, or under it: it covers no line), naming the marks that are not
    curves too: the min..max band over ``n_seeds`` seeds (when more than one), the dotted training-length line, and
    the dashed ``chance`` level when given."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles, labels = ax.get_legend_handles_labels()
    if n_seeds > 1:
        handles.append(Patch(facecolor="grey", alpha=0.25, lw=0))
        labels.append(f"shaded: min..max over {n_seeds} seeds (line: their mean)")
    handles.append(Line2D([], [], color="grey", ls=":", lw=0.8))
    labels.append("dotted: l_train, the longest training length")
    if chance is not None:
        handles.append(Line2D([], [], color="k", ls="--", lw=0.5))
        labels.append(f"dashed: chance level {chance:g}")
    where = (dict(loc="upper left", bbox_to_anchor=(1.01, 1.0)) if loc == "right"
             else dict(loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below_x_axis(ax)))
    ax.legend(handles, labels, fontsize=6.5, frameon=False, **where)


def paper_figure(name: str, data: Dict, quick: bool = False):
    """The Figure of one paper figure: per curve of ``data`` (``{label: {"lengths", "l_train", "mse": per-seed
    arrays}}``) the seed mean against test length with its min..max band, and a labelled line at each l_train.

    Curves that coincide (NoPE, ALiBi and RoPE on the length task) all stay visible: each has its own colour, line
    style and marker shape, its markers sit at lengths no other curve marks, and later curves are drawn thinner
    (:func:`torchtune_longshort.plots.axes.series_style`). ``quick``: the figure says it is a quick (smoke)
    run."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(7.2, 3.4), dpi=90, layout="constrained")
    ax = fig.subplots()
    for i, (label, d) in enumerate(data.items()):
        _curve(ax, i, len(data), label, np.array(d["lengths"]), d["mse"])
    mark_l_train(ax, [d["l_train"] for d in data.values()])
    # the reports' value axis: log with plain-number ticks (0.001, not 10^-3) when the errors span a decade
    drawn = [v for d in data.values() for a in d["mse"] for v in np.asarray(a, dtype=float).ravel()
             if 0 < v <= DRAWN_AT_MOST]
    curves = [ln for ln in ax.lines if ln.get_label() in data]
    if value_axis(ax, drawn) == "log":
        # a curve's exact zeros (NoPE fitting short lengths exactly) on the bottom edge, said in its label: the log
        # axis dropped them, and the curve began off the axes without a word
        zeros_on_bottom_edge(ax, curves)
    non_finite_said(curves)
    count_axis(ax, *_length_range(data))
    ax.set_xlabel("test length l")
    ax.set_ylabel("test MSE (target scale)")
    ax.set_title(FIGURE_TITLES[name], fontsize=9)
    legend_outside(ax, max(len(d["mse"]) for d in data.values()))
    ax.grid(alpha=0.3, lw=0.5)
    mark_quick(fig, quick)
    return fig


def _length_range(data: Dict) -> tuple:
    """The shortest and longest test length of a figure's curves."""
    lengths = [int(n) for d in data.values() for n in d["lengths"]]
    return min(lengths), max(lengths)


def zeros_on_bottom_edge(ax, lines) -> None:
    """On a log value axis, the exact zeros of a closed form (the length task's at l = (l_train+1)/2, a test length
    when l_train is odd) cannot be drawn: the point was dropped and the line broke off at both neighbours, leaving a
    gap. Each zero of ``lines`` is drawn on the axes' bottom edge instead (the limits frozen first), so the line runs
    down to the edge and back, and its legend label says so."""
    lo, hi = ax.get_ylim()
    ax.set_ylim(lo, hi)
    for line in lines:
        y = np.asarray(line.get_ydata(), dtype=float)
        if (y <= 0).any():
            line.set_ydata(np.where(y > 0, y, lo))
            line.set_label(f"{line.get_label()} (its 0 on the bottom edge)")


def non_finite_said(lines) -> None:
    """A curve's NaN or infinite points (a run that diverged or overflowed at long lengths) cannot be drawn: its legend
    label says how many are missing (the curve lost them, or vanished, without a word)."""
    for line in lines:
        bad = int((~np.isfinite(np.asarray(line.get_ydata(), dtype=float))).sum())
        if bad:
            what = (f"no finite value below {DRAWN_AT_MOST:g}: not drawn" if bad == len(line.get_ydata())
                    else f"{counted(bad, 'length')} without a finite value below {DRAWN_AT_MOST:g}, not drawn")
            line.set_label(f"{line.get_label()} ({what})")


def theory_figure(data: Dict, quick: bool = False):
    """The App. C.1 check: the trained linear-attention model's test MSE (seed mean, min..max band) against the
    closed forms, a panel per task: the length task against (l - (l_train+1)/2)^2, the sum task against both
    second-moment constants, (l+1)/(4l) and (l+1)/(2l), on a linear axis that holds both curves. The mean task
    (closed form 0) is stated in the title with its largest MSE. ``data`` as for :func:`paper_figure`, with the
    curves ``mean``, ``length`` and ``sum``."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(9.0, 4.2), dpi=90, layout="constrained")
    panels = fig.subplots(1, 2)
    for ax, task in zip(panels, ("length", "sum")):
        d = data[task]
        x, lt = np.array(d["lengths"]), d["l_train"]
        _curve(ax, 0, 3, f"trained ({task} task)", x, d["mse"])
        forms = ([("closed form (l - (l_train+1)/2)^2", length_error_closed_form(x, lt), "k", "--")] if task == "length"
                 else [("closed form with (l+1)/(4l)", sum_error_closed_form(x, lt, "binomial"), "k", "--"),
                       ("closed form with (l+1)/(2l)", sum_error_closed_form(x, lt, "doubled"), "tab:red", ":")])
        lines = [ax.plot(x, y, color=colour, ls=ls, lw=1.2, label=label)[0] for label, y, colour, ls in forms]
        values: List[float] = [float(v) for a in d["mse"] for v in a] + [float(v) for _, y, _, _ in forms for v in y]
        if task == "sum":  # linear from 0: the factor between the two forms is read as a ratio of heights
            ax.set_ylim(0, 1.06 * max(values))
        elif value_axis(ax, [v for v in values if v > 0]) == "log":
            zeros_on_bottom_edge(ax, lines)
        mark_l_train(ax, [lt])
        count_axis(ax, int(x.min()), int(x.max()))
        ax.set_xlabel("test length l")
        ax.set_ylabel("test MSE (target scale)")
        ax.set_title(f"{task} task", fontsize=9)
        legend_outside(ax, len(d["mse"]), loc="below")
        ax.grid(alpha=0.3, lw=0.5)
    mean = np.array(data["mean"]["mse"]) if "mean" in data else None
    title = FIGURE_TITLES["theory"]
    if mean is not None:
        zero = " (float32 zero)" if mean.max() <= FLOAT32_ZERO_MSE else ""
        title += f"\nmean task (closed form 0): test MSE <= {mean.max():.1g} at every length{zero}, not drawn"
    fig.suptitle(title, fontsize=9)
    mark_quick(fig, quick)
    return fig


def synthetic_figure(name: str, data: Dict, quick: bool = False):
    """The Figure of paper figure ``name`` (``theory`` or one of :func:`paper_figure`'s) from its curves."""
    return theory_figure(data, quick) if name == "theory" else paper_figure(name, data, quick)
