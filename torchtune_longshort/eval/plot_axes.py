"""Axis styles that read right at the edges, shared by every plot of the eval and study reports.

- :func:`value_axis`: a log scale only when the values span a decade or more; otherwise linear. Tick labels are
  plain numbers either way (no ``1.10072×10²`` on every tick of a short log axis) and there is never an offset
  text (``+1.219e1`` in a corner, colliding with labels and making the axis read 0-0.0035).
- :func:`length_axis`: sequence lengths on a log2 axis with one labelled tick per measured length (``128``,
  ``1k``), nothing else.
- :func:`heatmap_size` / :func:`wrapped_title`: a heatmap of one row or one column keeps readable cells and a
  title that fits the figure.
"""

from __future__ import annotations

import math
import textwrap
from typing import Iterable, Optional, Sequence, Tuple

# Values spanning less than this ratio (max / min) go on a linear axis.
LOG_SPAN = 10.0


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


def _plain_formatter():
    """A linear axis's tick texts: plain decimals with as many places as the tick step needs (so 12.1925 and
    12.1930 stay apart), all ticks with the same number of places, no offset, no exponent."""
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


def value_axis(ax, values: Iterable[Optional[float]], axis: str = "y", log_span: float = LOG_SPAN) -> str:
    """Scale and tick labels for the value axis of ``ax`` given the plotted ``values``; returns the scale used."""
    from matplotlib.ticker import FuncFormatter, LogLocator, MaxNLocator, NullFormatter

    vals = _finite(values)
    a = ax.yaxis if axis == "y" else ax.xaxis
    set_scale = ax.set_yscale if axis == "y" else ax.set_xscale
    if vals and min(vals) > 0 and max(vals) / min(vals) >= log_span:
        set_scale("log")
        a.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
        a.set_major_formatter(FuncFormatter(plain_number))
        a.set_minor_formatter(NullFormatter())
        scale = "log"
    else:
        set_scale("linear")
        a.set_major_locator(MaxNLocator(nbins=6))
        a.set_major_formatter(_plain_formatter())
        scale = "linear"
    return scale


def length_axis(ax, lengths: Sequence[int], axis: str = "x") -> None:
    """A log2 length axis with a labelled tick at each of ``lengths`` and no other tick label."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter, NullLocator

    from torchtune_longshort.eval.lengths import length_label

    ticks = sorted({int(n) for n in lengths})
    a = ax.xaxis if axis == "x" else ax.yaxis
    (ax.set_xscale if axis == "x" else ax.set_yscale)("log", base=2)
    a.set_major_locator(FixedLocator(ticks))
    a.set_major_formatter(FixedFormatter([length_label(n) for n in ticks]))
    a.set_minor_locator(NullLocator())
    a.set_minor_formatter(NullFormatter())
    if len(ticks) == 1:  # one point: give it room on both sides instead of a degenerate range
        (ax.set_xlim if axis == "x" else ax.set_ylim)(ticks[0] / 2, ticks[0] * 2)


def heatmap_size(n_cols: int, n_rows: int, cell: Tuple[float, float] = (0.9, 0.5),
                 extra: Tuple[float, float] = (2.4, 1.6),
                 min_size: Tuple[float, float] = (4.0, 2.6)) -> Tuple[float, float]:
    """Figure size (inches) for a heatmap of ``n_cols x n_rows`` cells plus labels and a colour bar, never below
    ``min_size`` (a single column or row is not squeezed to a sliver)."""
    return (max(min_size[0], extra[0] + cell[0] * n_cols), max(min_size[1], extra[1] + cell[1] * n_rows))


def wrapped_title(title: str, width_in: float, fontsize: float = 9.0) -> str:
    """``title`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points."""
    chars = max(12, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(title, chars, break_on_hyphens=False)) or title
