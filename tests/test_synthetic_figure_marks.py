"""Hand mutants of synthetic/figures.py that survived test_plots_synthetic and test_count_axis_ends (mutants15).

References: the seeds' own min, max and mean (numpy, written in the test), and the module docstring's promises
(the band named with its number of seeds; the mean task's error called float32's zero only at that size)."""

from __future__ import annotations

import numpy as np

from torchtune_longshort.synthetic.figures import L_TRAIN_GID, paper_figure, theory_figure


def _data(seeds, l_trains=(3,)):
    x = list(range(1, 9))
    return {f"l_train = {lt}": {"lengths": x, "l_train": lt, "mse": [np.asarray(s, float) for s in seeds]}
            for lt in l_trains}


def _main_axes(fig):
    return [a for a in fig.axes if a.get_gid() != L_TRAIN_GID][0]


def test_two_seeds_get_their_band_and_its_legend_entry():
    a, b = np.linspace(1, 8, 8), np.linspace(2, 16, 8)
    ax = _main_axes(paper_figure("4", _data([a, b])))
    bands = ax.collections
    assert len(bands) == 1
    ys = bands[0].get_paths()[0].vertices[:, 1]
    assert np.isclose(ys.min(), np.minimum(a, b).min()) and np.isclose(ys.max(), np.maximum(a, b).max())
    assert "shaded: min..max over 2 seeds (line: their mean)" in [t.get_text() for t in ax.get_legend().get_texts()]


def test_the_theory_title_calls_only_a_float32_sized_error_zero():
    x = np.arange(1, 9, dtype=float)
    for mean_err, zero in ((1e-15, True), (1e-6, False)):
        data = {"mean": {"lengths": list(x), "l_train": 3, "mse": [np.full(8, mean_err)]},
                "length": {"lengths": list(x), "l_train": 3, "mse": [(x - 2) ** 2 + 0.1]},
                "sum": {"lengths": list(x), "l_train": 3, "mse": [np.full(8, 0.5)]}}
        assert ("(float32 zero)" in theory_figure(data)._suptitle.get_text()) is zero
