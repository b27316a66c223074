"""Axis styles that read right at the edges, shared by every plot of the eval and study reports.

- :func:`value_axis`: a log scale only when the values span a decade or more; otherwise linear. Tick labels are
  plain numbers either way (no ``1.10072×10²`` on every tick of a short log axis) and there is never an offset
  text (``+1.219e1`` in a corner, colliding with labels and making the axis read 0-0.0035). A linear axis never
  spans less than :data:`MIN_SPAN_FRACTION` of its largest value (:func:`value_limits`): near-equal values
  (perplexity 408.1 .. 414.3) sit in a band of the axis, with a note under the axes saying the axis was widened,
  instead of filling it and making noise look like separation. Either way the axis ends on a labelled tick at or
  beyond the values.
- :func:`length_axis`: sequence lengths on a log2 axis with one labelled tick per measured length (``128``,
  ``1k``), nothing else; :func:`count_axis`: every whole length ``1 .. n`` (the synthetic tasks' test lengths) on a
  linear axis whose first and last labels are its first and last lengths, never a ``0`` that is no length.
  :func:`position_axis`: a per-position curve's axis, its first and last position labelled (linear or log2).
  :data:`LENGTH_LABEL` / :data:`POSITION_LABEL`: the axis names every report's length and position axes carry;
  :func:`below_x_axis`: where a legend under an axes starts, clear of its x axis's labels at any axes height.
- :func:`series_style` / :func:`mark_quick`: every line of a figure stays visible when lines coincide, and a quick
  (smoke) run's figure says so.
- :func:`note_missing`: what a panel does not show, and why, written on it (an empty panel is never bare axes);
  :func:`overlapping`: the points of a scatter panel that make one blot, for its title to name.
- :func:`table_number`: a number as the reports' tables print it (no exponent on a large one).

How a figure's panels are sized and laid out (heatmaps, rows of panels that wrap, titles that fit) is
:mod:`torchtune_longshort.plots.panels`.
"""

from __future__ import annotations

import math
from typing import Iterable, Optional, Sequence, Tuple

from torchtune_longshort.lengths import length_label
from torchtune_longshort.plots.label_room import fitting_ticks
from torchtune_longshort.plots.panels import wrapped_title

# Values spanning less than this ratio (max / min) go on a linear axis.
LOG_SPAN = 10.0
# A log value axis spanning more decades than this labels each decade only (1, 10, 100), not 1, 2, 5, 10, ...
LOG_125_DECADES = 3.0
# A linear value axis shows at least this fraction of its largest |value| (the one rule for every value axis of
# the eval and study reports): a 1.5 % spread of perplexities fills a quarter of the axis, not all of it.
MIN_SPAN_FRACTION = 0.25
# The text a quick (smoke) run's figures carry: their numbers come from a few steps and mean nothing.
QUICK_MARK = "quick (smoke) run: numbers mean nothing"
# The ``gid`` of the note :func:`value_axis` writes on an axis it widened (tests and readers find it by it).
WIDENED_GID = "value_axis_widened"
WIDENED_SIZE = 6.5  # its font size (points)
# The ``gid`` of the note :func:`note_missing` writes on a panel: what it does not show, and why.
MISSING_GID = "why_empty"
# The names of the length and position axes, the same on every plot of the eval and study reports.
LENGTH_LABEL = "sequence length (tokens)"
POSITION_LABEL = "position (tokens)"


def _finite(values: Iterable[Optional[float]]) -> list:
    return [float(v) for v in values if v is not None and isinstance(v, (int, float)) and math.isfinite(v)]


def plain_number(v: float, _pos=None) -> str:
    """Tick text of a log axis (1, 2, 5, 10, 20, ...): the number as written, no exponent for ordinary
    magnitudes."""
    if v == 0:
        return "0"
    if 1e-4 <= abs(v) < 1e7:
        return f"{v:.6f}".rstrip("0").rstrip(".")
    return f"{v:.3g}"


def table_number(v: float, digits: int = 4) -> str:
    """A number in a report's table: ``digits`` significant digits (``412.6``, ``0.1235``), but one with more
    digits before the point printed whole, never with an exponent (``15321``, not ``1.532e+04``: a base model's
    perplexity past its context, a run's seconds)."""
    if 10 ** digits <= abs(float(f"{v:.{digits}g}")) < 1e15:
        return f"{v:.0f}"
    return f"{v:.{digits}g}"


def _plain_formatter():
    """A linear axis's tick texts: plain decimals with as many places as the tick step needs (so 12.1925 and
    12.1930 stay apart), all ticks with the same number of places, no offset, no exponent. Not matplotlib's
    ``ScalarFormatter(useOffset=False)``: it writes an exponent text below 1e-4 and from 1e6 up, and with
    ``set_scientific(False)`` every tick under 1e-8 reads 0.000... (it rounds ``|x| < 1e-8`` to 0)."""
    from matplotlib.ticker import Formatter

    class PlainDecimals(Formatter):
        def format_ticks(self, values):
            vals = sorted(float(v) for v in values)
            steps = [b - a for a, b in zip(vals, vals[1:]) if b > a]
            step = min(steps) if steps else (abs(vals[0]) if vals and vals[0] else 1.0)
            places = max(0, -math.floor(math.log10(step)))
            while places < 12 and abs(round(step, places) - step) > 1e-9 * step:
                places += 1
            self._places = places
            return [self(v) for v in values]

        def __call__(self, x, pos=None):
            text = f"{x:.{getattr(self, '_places', 6)}f}"
            return "0" if float(text) == 0 else text

    return PlainDecimals()


def value_limits(values: Iterable[Optional[float]], min_fraction: float = MIN_SPAN_FRACTION
                 ) -> Optional[Tuple[float, float]]:
    """Limits of a linear axis for ``values`` when they lie closer together than ``min_fraction`` of their largest
    magnitude (None when their own spread is wide enough, or there is nothing to scale).

    The band keeps the values' centre and is ``min_fraction * max|v|`` wide; values that are all >= 0 keep a
    floor of 0 (a perplexity axis never shows negative numbers)."""
    vals = _finite(values)
    if not vals:
        return None
    lo, hi = min(vals), max(vals)
    need = min_fraction * max(abs(lo), abs(hi))
    if need == 0 or hi - lo >= need:
        return None
    bottom = (lo + hi) / 2 - need / 2
    if lo >= 0 and bottom < 0:
        bottom = 0.0
    return bottom, bottom + need


def value_axis(ax, values: Iterable[Optional[float]], axis: str = "y", log_span: float = LOG_SPAN,
               min_fraction: float = MIN_SPAN_FRACTION, margin: float = 0.02) -> str:
    """Scale, limits and tick labels for the value axis of ``ax`` given the plotted ``values`` (every value drawn on
    it: the limits are set here); returns the scale used. The axis ends on a labelled tick at or beyond the values
    at both ends (and ``margin`` of the ticks' span past it, room for a marker on it): matplotlib's own limits left
    the top point (10.2) over the last label (9.0). A linear axis is widened to :func:`value_limits`
    when the values are near-equal, and then carries a small note (gid :data:`WIDENED_GID`) under the x axis's
    label, where it covers no data, that says how close they are."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    vals = _finite(values)
    a = ax.yaxis if axis == "y" else ax.xaxis
    set_scale = ax.set_yscale if axis == "y" else ax.set_xscale
    set_lim = ax.set_ylim if axis == "y" else ax.set_xlim
    if vals and min(vals) > 0 and max(vals) / min(vals) >= log_span:
        set_scale("log")
        # 1-2-5 ticks over a few decades; past LOG_125_DECADES, one per decade (21 labels over 7 decades overlapped)
        decades = math.log10(max(vals) / min(vals))
        a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0) if decades <= LOG_125_DECADES else (1.0,)))
        a.set_major_formatter(FuncFormatter(plain_number))
        a.set_minor_formatter(NullFormatter())
        _end_on_ticks(a, set_lim, min(vals), max(vals), margin, log=True)
        return "log"
    set_scale("linear")
    a.set_major_locator(MaxNLocator(nbins=6))
    a.set_major_formatter(_plain_formatter())
    lim = value_limits(vals, min_fraction) or ((min(vals), max(vals)) if vals else None)
    if lim is not None and lim[1] > lim[0]:
        _end_on_ticks(a, set_lim, *lim, margin)
    if value_limits(vals, min_fraction) is not None:
        spread = (max(vals) - min(vals)) / max(abs(v) for v in vals)
        note = f"{axis} axis widened: " + (f"values within {100 * spread:.2g}% of each other" if spread
                                           else "all values equal" if len(vals) > 1 else "one value")
        old = next((t for t in ax.texts if t.get_gid() == WIDENED_GID), None)
        if old is not None:  # one note per axes, a line per widened axis
            old.set_text(f"{old.get_text()}\n{note}")
        else:  # under the x axis's label, outside the axes: inside, at a corner, it lay on a point there
            ax.annotate(note, xy=(0.5, 0.0), xycoords=("axes fraction", ax.xaxis.label), xytext=(0, -2),
                        textcoords="offset points", ha="center", va="top", fontsize=WIDENED_SIZE, color="dimgrey",
                        gid=WIDENED_GID, annotation_clip=False)
    return "linear"


def _end_on_ticks(a, set_lim, lo: float, hi: float, margin: float, log: bool = False) -> None:
    """Limits of axis ``a`` just past (``margin`` of their span) its major locator's last tick at or below ``lo`` and
    first at or above ``hi``, and those ticks fixed (asked again over the wider range, the locator may step
    differently: 2.5 .. 15 in 2 .. 16)."""
    from matplotlib.ticker import FixedLocator

    ticks = [float(t) for t in a.get_major_locator().tick_values(lo, hi)]
    below, above = [t for t in ticks if t <= lo], [t for t in ticks if t >= hi]
    if below and above:
        first, last = max(below), min(above)
        a.set_major_locator(FixedLocator([t for t in ticks if first <= t <= last]))
        if log:
            pad = (last / first) ** margin
            set_lim(first / pad, last * pad)
        else:
            set_lim(first - margin * (last - first), last + margin * (last - first))


def length_axis(ax, lengths: Sequence[int], axis: str = "x") -> None:
    """A log2 length axis with a labelled tick at each of ``lengths`` and no other tick label."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter, NullLocator

    ticks = sorted({int(n) for n in lengths})
    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    a.set_major_locator(FixedLocator(ticks))
    a.set_major_formatter(FixedFormatter([length_label(n) for n in ticks]))
    a.set_minor_locator(NullLocator())
    a.set_minor_formatter(NullFormatter())
    if len(ticks) == 1:  # one point: give it room on both sides instead of a degenerate range
        (ax.set_xlim if axis == "x" else ax.set_ylim)(ticks[0] / 2, ticks[0] * 2)


def count_axis(ax, first: int, last: int, axis: str = "x", max_ticks: int = 7) -> None:
    """A linear axis of the whole numbers ``first .. last`` (test lengths ``1 .. 50``): a labelled tick at ``first``,
    at round steps between and at ``last`` (``1, 10, 20, .. 50``; ``1, 5, 10, 16``: a --quick run's last length was
    not labelled), plain numbers, no tick outside the range (matplotlib's own put ``0``, no length, first, or began
    at ``2`` and left length 1 unlabelled)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, MaxNLocator, NullLocator

    first, last = int(first), int(last)
    round_ticks = [int(t) for t in MaxNLocator(nbins=max_ticks - 1, integer=True, steps=[1, 2, 5, 10])
                   .tick_values(first, last) if first < t <= last]
    step = round_ticks[1] - round_ticks[0] if len(round_ticks) > 1 else max(1, last - first)
    # none crowding the first one's label or the last one's
    ticks = [first] + [t for t in round_ticks if t - first >= step / 2 and (t == last or last - t >= step / 2)]
    ticks += [last] if last > ticks[-1] else []
    a = ax.xaxis if axis == "x" else ax.yaxis
    a.set_major_locator(FixedLocator(ticks))
    a.set_major_formatter(FixedFormatter([str(t) for t in ticks]))
    a.set_minor_locator(NullLocator())


def position_axis(ax, first: float, last: int, log2: bool = False, max_ticks: int = 8) -> None:
    """The x axis of a per-position curve from ``first`` to ``last`` (its first and last position, labelled, with
    round ones between: ``0, 200, .., 1023``; matplotlib's own stopped at 1000), in view with a margin. ``log2``: a
    log2 axis (position 0 has no place on it: ``first`` is the first point, ``0.5``), powers of 2 between, every
    other one or more, none whose label would touch another's as measured (``0.5, 2, 8, .., 16383``)."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullLocator

    if not log2:
        count_axis(ax, int(first), int(last), max_ticks=max_ticks)
        pad = 0.03 * max(1, last - first)
        ax.set_xlim(first - pad, last + pad)
        return
    lo, hi = math.log2(first), math.log2(last)
    stride = max(1, math.ceil((hi - lo) / (max_ticks - 1)))
    inner = [2.0 ** k for k in range(math.ceil(lo), math.floor(hi) + 1)
             if k % stride == 0 and k - lo >= stride / 2 and hi - k >= stride / 2]
    ticks = [first] + inner + [last]
    labels = [length_label(int(t)) if t >= 1 and t == int(t) else plain_number(t) for t in ticks]
    ax.set_xscale("log", base=2)
    ax.set_xlim(first / 2 ** (0.03 * (hi - lo)), last * 2 ** (0.03 * (hi - lo)))
    keep = fitting_ticks(ax, ticks, labels)  # a label too wide for its room drops its tick ("1k" beside "2100")
    ax.xaxis.set_major_locator(FixedLocator([ticks[i] for i in keep]))
    ax.xaxis.set_major_formatter(FixedFormatter([labels[i] for i in keep]))
    ax.xaxis.set_minor_locator(NullLocator())


def below_x_axis(ax):
    """The axes' coordinates moved down by the height of its x tick marks, tick labels and axis label (in points, as
    matplotlib lays them out): a legend anchored at ``(0.5, 0)`` of it (``loc="upper center"``) starts under the
    label whatever the axes' height. A fixed fraction of the height does not: -0.16 put the synthetic theory
    figure's legends on its 'test length l', -0.14 the study's Table 1 scatter's on its x label when notes under it
    shortened the axes."""
    from matplotlib import rcParams
    from matplotlib.font_manager import FontProperties
    from matplotlib.transforms import ScaledTranslation

    def line(key: str) -> float:
        return 1.25 * FontProperties(size=rcParams[key]).get_size_in_points()

    down = (rcParams["xtick.major.size"] + rcParams["xtick.major.pad"] + line("xtick.labelsize")
            + rcParams["axes.labelpad"] + line("axes.labelsize") + 2.0)
    widened = next((t for t in ax.texts if t.get_gid() == WIDENED_GID), None)
    if widened is not None:  # value_axis's note sits under the label: the legend goes under it
        down += 2.0 + 1.25 * WIDENED_SIZE * (widened.get_text().count("\n") + 1)
    return ax.transAxes + ScaledTranslation(0.0, -down / 72.0, ax.figure.dpi_scale_trans)


# Line styles and markers cycled over a figure's series; with the colour cycle they tell coinciding lines apart.
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*")


def series_style(i: int, n_series: int, n_points: int, markers_per_line: int = 10) -> dict:
    """``Axes.plot`` / ``Axes.errorbar`` keywords for series ``i`` (in draw order) of ``n_series`` lines over
    ``n_points`` x values, so that every line stays visible where lines coincide: its own colour, line style and
    marker shape, and a line width that shrinks with the draw order (a line drawn over an equal one leaves it
    showing at both sides). Up to ``markers_per_line`` points, every point is marked and the marker size shrinks
    with the draw order too; the first series' markers are filled, the later ones' open (an outline), so that a
    later marker drawn on an equal point never hides an earlier one (a filled square 1 pt smaller covered a filled
    circle to a ring under 1 pt wide); beyond, each line marks about ``markers_per_line`` points at x positions no
    other series marks (``markevery`` with a per-series offset)."""
    spread = n_points > markers_per_line
    step = max(n_series, -(-n_points // markers_per_line))
    return {"color": f"C{i % 10}", "linestyle": LINESTYLES[i % len(LINESTYLES)], "marker": MARKERS[i % len(MARKERS)],
            "markevery": (i % step, step) if spread else None, "ms": 4.5 if spread else max(3.0, 7.5 - i),
            "mfc": "none" if i and not spread else f"C{i % 10}", "mew": 1.2,
            "lw": max(0.8, 2.2 - 0.3 * i), "zorder": 2 + i / 100}


def mark_quick(fig, quick: bool) -> None:
    """Put :data:`QUICK_MARK` on top of ``fig`` (above its suptitle when it has one) when ``quick``."""
    if not quick:
        return
    title = fig.get_suptitle()
    if title:
        fig._suptitle.set_text(f"{QUICK_MARK}\n{title}")
    else:
        fig.suptitle(QUICK_MARK, fontsize=9, color="tab:red")


def _drawn(ax) -> bool:
    """Whether ``ax`` shows any data: a line or collection with points, a bar, an image."""
    from matplotlib.collections import PathCollection

    # a line in data coordinates (a reference line such as axvline spans the axes: it shows no data)
    return (any(len(ln.get_xdata()) and ln.get_transform() is ax.transData for ln in ax.lines)
            or bool(ax.patches) or bool(ax.images)
            or any(len(c.get_offsets()) if isinstance(c, PathCollection) else len(c.get_paths())
                   for c in ax.collections))


def note_missing(ax, text: str, width_in: float, fontsize: float = 7.0, below=None) -> None:
    """Write ``text`` (what the panel ``ax`` does not show, and why) on it, wrapped to ``width_in`` inches, gid
    :data:`MISSING_GID`: centred in the axes when nothing is drawn there (and the meaningless value ticks of an
    empty axis are removed), else under ``below`` (an artist under the axes: its legend; default its x-axis
    label, or :func:`value_axis`'s note under it), where it covers no data."""
    if not text:
        return
    below = below or next((t for t in ax.texts if t.get_gid() == WIDENED_GID), None)
    body = "\n".join(wrapped_title(part, width_in, fontsize) for part in text.split("\n"))
    if not _drawn(ax):
        ax.set_yticks([])
        ax.text(0.5, 0.5, body, transform=ax.transAxes, ha="center", va="center", fontsize=fontsize,
                color="dimgrey", gid=MISSING_GID)
        return
    ax.annotate(body, xy=(0.5, 0.0), xycoords=("axes fraction", below or ax.xaxis.label), xytext=(0, -3),
                textcoords="offset points", ha="center", va="top", fontsize=fontsize, color="dimgrey", gid=MISSING_GID,
                annotation_clip=False)


def overlapping(ax, pts: Sequence[Tuple[str, float, float]], frac: float = 0.025) -> list:
    """The names of ``pts`` (``(name, x, y)``) whose points lie within about a marker of each other on ``ax``
    (``frac`` of both axes' spans, chained), one sorted list per group of two or more: they overlay into one blot at
    a figure's size, so the panel's title names them (call it after the axis limits are set)."""
    (x0, x1), (y0, y1) = ax.get_xlim(), ax.get_ylim()
    sx, sy = abs(x1 - x0) or 1.0, abs(y1 - y0) or 1.0
    groups: list = []
    for p in pts:
        near = [g for g in groups if any(abs(p[1] - q[1]) < frac * sx and abs(p[2] - q[2]) < frac * sy for q in g)]
        merged = [p] + [q for g in near for q in g]
        groups = [g for g in groups if g not in near] + [merged]
    return [sorted(q[0] for q in g) for g in groups if len(g) > 1]
