"""The synthetic figures' test-length axis labels its first and its last length: a --quick run (test lengths 1..16)
drew ticks 1, 5, 10, 15 and left 16, where every curve ends, unlabelled (a --l-test 47 run alike: ..., 40, no 47).
The references: the lengths the figure's data holds (their min and max), and matplotlib's own rendered extents of
the tick labels (none overlapping another)."""

import numpy as np
import pytest
from plot_helpers import draw

from torchtune_longshort.synthetic.figures import paper_figure


@pytest.mark.parametrize("last", [16, 47, 50, 11, 2])
def test_length_axis_labels_its_first_and_last_length_without_overlap(last):
    lengths = list(range(1, last + 1))
    data = {"NoPE": {"lengths": lengths, "l_train": 1 if last < 6 else 6, "mse": [np.geomspace(1e-3, 1e2, last)]}}
    fig = draw(paper_figure("1b", data))
    ax = fig.axes[0]
    shown = [(t.get_text(), t) for t in ax.xaxis.get_ticklabels() if t.get_visible() and t.get_text()]
    numbers = [int(text) for text, _ in shown]
    assert numbers[0] == min(lengths) and numbers[-1] == max(lengths), numbers
    assert all(min(lengths) <= n <= max(lengths) for n in numbers) and numbers == sorted(set(numbers))
    r = fig.canvas.get_renderer()
    boxes = [t.get_window_extent(r) for _, t in shown]
    assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), numbers
