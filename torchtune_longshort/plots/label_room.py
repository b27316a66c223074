"""Which tick labels of an axis fit side by side, measured as matplotlib will draw them: each label's width from a
renderer at the figure's dpi in the axis's tick-label font, each tick's place from the axes' current transform. A
rule in octaves or steps guesses at widths ("1k" and "2100" an octave apart lay on each other on a 4-inch axes)."""

from __future__ import annotations

from typing import List, Sequence

# The least room between two neighbouring labels, in the labels' font size (a space's width, about).
GAP_EM = 0.3


def fitting_ticks(ax, ticks: Sequence[float], labels: Sequence[str]) -> List[int]:
    """The indexes of ``ticks`` (x positions, in order, on ``ax``'s x axis with its scale and limits set) whose
    ``labels`` are drawn clear of each other: the first and the last always, each one between kept where its label
    clears the one kept before it and the last one's."""
    from matplotlib.backends.backend_agg import RendererAgg

    dpi = ax.figure.dpi
    renderer = RendererAgg(1, 1, dpi)
    font = ax.xaxis.get_major_ticks()[0].label1.get_fontproperties()
    half = [renderer.get_text_width_height_descent(label, font, ismath=False)[0] / 2 for label in labels]
    x = [ax.transData.transform((t, 0))[0] for t in ticks]
    gap = GAP_EM * font.get_size_in_points() * dpi / 72

    def clear(i: int, j: int) -> bool:
        return abs(x[j] - x[i]) >= half[i] + half[j] + gap

    keep = [0]
    for i in range(1, len(ticks) - 1):
        if clear(keep[-1], i) and clear(i, len(ticks) - 1):
            keep.append(i)
    return keep + [len(ticks) - 1] if len(ticks) > 1 else keep
