"""The synthetic figures' test-length axis labels its first and its last length: a --quick run (test lengths 1..16)
drew ticks 1, 5, 10, 15 and left 16, where every curve ends, unlabelled (a --l-test 47 run alike: ..., 40, no 47).
The references: the lengths the figure's data holds (their min and max), and matplotlib's own rendered extents of
the tick labels (none overlapping another). The sparsity probes' figures alike (their first test length, 5, was not
labelled)."""

import numpy as np
import pytest
from plot_helpers import draw, drawn_ticklabels

from torchtune_longshort.synthetic.figures import L_TRAIN_GID, paper_figure
from torchtune_longshort.synthetic.sparsity_probes.figures import probe_figure


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


@pytest.mark.parametrize("name, lengths", [("parity", (5, 10, 20, 30, 40)), ("planted", (5, 10, 20, 40, 80)),
                                           ("scratchpad", (3, 6, 12))])
def test_probe_figures_label_their_first_and_last_test_length(name, lengths):
    # the sparsity probes' figures (fig_planted etc.) took matplotlib's own ticks: 20, 40, 60, 80 and 10, .., 40, their
    # first test length, 5, unlabelled; the reference: the lengths the table holds
    acc = {f"{g},{n}": 1.0 - n / 200 for g in (("answer", "exact") if name == "scratchpad" else (1, 2)) for n in lengths}
    label = {"parity": "K_train=2", "planted": "k=2, spread", "scratchpad": "scratchpad, RoPE"}[name]
    fig = draw(probe_figure(name, {label: {"l_train": lengths[1], "k_train": 2, "chance": 0.5, "acc_mean": acc}}))
    r = fig.canvas.get_renderer()
    for ax in [a for a in fig.axes if a.get_gid() != L_TRAIN_GID]:
        shown = [t for t in drawn_ticklabels(ax.xaxis) if t.get_text()]  # those in the view
        numbers = [int(t.get_text()) for t in shown]
        assert numbers[0] == min(lengths) and numbers[-1] == max(lengths), numbers
        assert numbers == sorted(set(numbers)) and all(min(lengths) <= n <= max(lengths) for n in numbers)
        boxes = [t.get_window_extent(r) for t in shown]
        assert not any(a.overlaps(b) for a, b in zip(boxes, boxes[1:])), numbers
