"""How a report figure's panels are sized and laid out, shared by the eval, study and Table 1 figures.

- :func:`heatmap_size` / :func:`wrapped_title` / :func:`fraction_text`: a heatmap of one row or one column keeps
  readable cells and a title that fits the figure, and its cells never round a fraction onto 0 or 1;
- :func:`wrap_columns` / :func:`wrapped_panels` / :func:`panel_row`: a row of many panels (one per method or alpha)
  wraps onto more rows instead of making a figure wider than :data:`MAX_FIGURE_WIDTH_IN`.

The axes inside each panel follow :mod:`torchtune_longshort.plots.axes`.
"""

from __future__ import annotations

import math
import textwrap
from typing import Tuple


def heatmap_size(n_cols: int, n_rows: int, cell: Tuple[float, float] = (0.9, 0.5),
                 extra: Tuple[float, float] = (2.4, 1.6),
                 min_size: Tuple[float, float] = (4.0, 2.6)) -> Tuple[float, float]:
    """Figure size (inches) for a heatmap of ``n_cols x n_rows`` cells plus labels and a colour bar, never below
    ``min_size`` (a single column or row is not squeezed to a sliver)."""
    return (max(min_size[0], extra[0] + cell[0] * n_cols), max(min_size[1], extra[1] + cell[1] * n_rows))


# The widest figure a row of panels makes (inches); more panels wrap onto another row.
MAX_FIGURE_WIDTH_IN = 24.0


def wrap_columns(n_panels: int, panel_width: float, extra: float = 0.0,
                 max_width: float = MAX_FIGURE_WIDTH_IN) -> int:
    """Columns for a row of ``n_panels`` panels of ``panel_width`` inches (plus ``extra`` for labels and a colour
    bar) that keep the figure within ``max_width``; at least one."""
    return max(1, min(n_panels, int((max_width - extra) // panel_width)))


def wrapped_panels(fig, blocks: int, per_block: int, cols: int, **subplots) -> list:
    """A ``blocks x per_block`` grid of panels (methods x alphas), each block's row wrapped onto
    ``ceil(per_block / cols)`` rows of ``cols``: ``(ax, show_x, show_y)`` per panel in order, where ``show_x`` says
    that nothing is drawn below the panel (it carries the x tick labels) and ``show_y`` that it starts a row. The
    wrapped grid's unused axes are hidden; ``subplots``: more arguments of ``fig.subplots`` (``sharey=True``)."""
    per_row = math.ceil(per_block / cols)
    axes = fig.subplots(blocks * per_row, cols, squeeze=False, **subplots)
    used = {(b * per_row + j // cols, j % cols) for b in range(blocks) for j in range(per_block)}
    for r, row in enumerate(axes):
        for c, ax in enumerate(row):
            if (r, c) not in used:
                ax.set_visible(False)
    return [(axes[r, c], (r + 1, c) not in used, c == 0)
            for r, c in sorted(used)]


def panel_row(n_panels: int, panel_size: Tuple[float, float], **subplots) -> tuple:
    """A constrained-layout Figure of ``n_panels`` panels of ``panel_size`` inches (one per method) in a row that
    wraps onto more rows past :data:`MAX_FIGURE_WIDTH_IN`: ``(fig, [ax, ...])``."""
    from matplotlib.figure import Figure

    cols = wrap_columns(n_panels, panel_size[0])
    fig = Figure(figsize=(panel_size[0] * cols, panel_size[1] * math.ceil(n_panels / cols)), layout="constrained")
    return fig, [ax for ax, _, _ in wrapped_panels(fig, 1, n_panels, cols, **subplots)]


def fraction_text(v: float) -> str:
    """A fraction in [0, 1] in a heatmap cell, two decimals, never rounded onto its end: 0.004 is ``<0.01`` and
    0.996 is ``>0.99`` (both read ``0.00`` / ``1.00``, as if nothing or everything had been right)."""
    if 0 < v < 0.005:
        return "<0.01"
    if 0.995 <= v < 1:
        return ">0.99"
    return f"{v:.2f}"


def wrapped_title(title: str, width_in: float, fontsize: float = 9.0) -> str:
    """``title`` wrapped to lines that fit ``width_in`` inches at ``fontsize`` points."""
    chars = max(12, int(width_in * 72 / (0.55 * fontsize)))
    return "\n".join(textwrap.wrap(title, chars, break_on_hyphens=False)) or title
