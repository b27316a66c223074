"""The synthetic experiments' figures (the paper's and the sparsity probes'), rendered from small curves and checked
through matplotlib's objects: coinciding curves all visible, every mark explained (the seeds' band, the
training-length line, the chance line), legends that cover no line, the theory figure's two sum-task constants told
apart, quick runs marked, and the PNGs redrawn from the CSVs without training."""

from __future__ import annotations

import json

import numpy as np
import pytest
from plot_helpers import check_every_series_visible, check_legend_under, draw, inside_figure, texts, ticks

from torchtune_longshort.plots.axes import QUICK_MARK
from torchtune_longshort.synthetic.experiments import replot_figures
from torchtune_longshort.synthetic.figures import L_TRAIN_GID, paper_figure, theory_figure
from torchtune_longshort.synthetic.sparsity_probes.figures import probe_figure
from torchtune_longshort.synthetic.theory import sum_error_closed_form


def _coinciding(labels, n_points, seeds=2):
    """Synthetic-figure data where every curve has exactly the same values (NoPE, ALiBi, RoPE on the length task)."""
    y = np.geomspace(1e-3, 2e3, n_points)
    return {lab: {"lengths": list(range(1, n_points + 1)), "l_train": 10, "mse": [y] * seeds} for lab in labels}


@pytest.mark.parametrize("name, labels, n_points", [("1b", ["NoPE", "learned abs.", "ALiBi", "RoPE"], 50),
                                                    ("1c", [f"f = {f}" for f in "abcdef"], 50),
                                                    ("4", ["l_train = 6", "l_train = 10"], 16)])
def test_synthetic_coinciding_curves_all_visible(name, labels, n_points):
    fig = draw(paper_figure(name, _coinciding(labels, n_points)))
    ax = fig.axes[0]
    assert [t.get_text() for t in ax.get_legend().get_texts()][:len(labels)] == labels
    check_every_series_visible(ax, fig)
    assert not any(QUICK_MARK in t for t in texts(fig))


def _l_train_ticks(ax):
    top = [c for c in ax.child_axes if c.get_gid() == L_TRAIN_GID]
    assert len(top) == 1, "no labelled l_train axis"
    return top[0], [float(x) for x in top[0].xaxis.get_majorticklocs()]


def _check_legend_outside(fig, ax):
    # the theory figure's legends, anchored at a fixed -0.16 of the axes' height, sat on its 'test length l'
    check_legend_under(fig, ax)


def test_paper_figure_explains_band_and_l_train_and_keeps_its_legend_off_the_lines():
    data = {f"l_train = {lt}": {"lengths": list(range(1, 41)), "l_train": lt,
                                "mse": [np.geomspace(1e-3, 1e3, 40) * (1 + 0.1 * s) for s in range(3)]}
            for lt in (10, 20)}
    fig = draw(paper_figure("4", data))
    ax = fig.axes[0]
    entries = [t.get_text() for t in ax.get_legend().get_texts()]
    assert "shaded: min..max over 3 seeds (line: their mean)" in entries  # the band, named with its seed count
    assert any("l_train" in e and "dotted" in e for e in entries)
    top, locs = _l_train_ticks(ax)
    assert locs == [10.0, 20.0] and [t.get_text() for t in top.get_xticklabels()] == ["10", "20"]
    assert "l_train" in top.get_xlabel()
    dotted = sorted(float(ln.get_xdata()[0]) for ln in ax.get_lines() if ln.get_linestyle() == ":")
    assert dotted == [10.0, 20.0]  # one dotted line per labelled tick
    _check_legend_outside(fig, ax)
    # the x axis labels its first test length (matplotlib's own began at 0, no length, or at 2 on 1..10) and the
    # value axis reads as the reports' do: plain numbers (0.001, not 10^-3), one per decade over 6 decades
    assert [t for _, t in ticks(ax.xaxis)] == ["1", "10", "20", "30", "40"]
    # (to 10000: the top values, 1200, lie past 1000, and the axis ends on a labelled tick at or beyond them)
    assert [t for _, t in ticks(ax.yaxis)] == ["0.001", "0.01", "0.1", "1", "10", "100", "1000", "10000"]
    short = {"f = y": {"lengths": list(range(1, 11)), "l_train": 5, "mse": [np.linspace(1.0, 2.0, 10)]}}
    assert [t for _, t in ticks(draw(paper_figure("5", short)).axes[0].xaxis)] == ["1", "2", "4", "6", "8", "10"]
    one_seed = draw(paper_figure("4", {k: {**v, "mse": v["mse"][:1]} for k, v in data.items()}))
    assert not any("shaded" in t.get_text() for t in one_seed.axes[0].get_legend().get_texts())  # no band drawn


def test_theory_figure_shows_the_two_sum_constants_apart():
    # docs/synthetic/figtheory.png spanned 1e-17..1e4 (the mean task's float32 zero set the axis), so (l+1)/(4l)
    # and (l+1)/(2l), a factor of ~2 apart, were one band 1/20 of the axis wide.
    l, lt = np.arange(1, 51), 10
    binomial = sum_error_closed_form(l, lt, "binomial")
    data = {"mean": {"lengths": list(l), "l_train": lt, "mse": [np.full(50, 1e-15), np.full(50, 3e-15)]},
            "length": {"lengths": list(l), "l_train": lt, "mse": [(l - 5.5) ** 2 + 0.01, (l - 5.5) ** 2 + 0.02]},
            "sum": {"lengths": list(l), "l_train": lt, "mse": [binomial * 0.99, binomial * 1.01]}}
    fig = draw(theory_figure(data))
    sum_ax = next(ax for ax in fig.axes if ax.get_title() == "sum task")
    lo, hi = sum_ax.get_ylim()
    doubled = sum_error_closed_form(l, lt, "doubled")
    assert sum_ax.get_yscale() == "linear" and lo <= 0 and doubled.max() <= hi <= 1.25 * doubled.max()
    gap = (doubled[-1] - binomial[-1]) / (hi - lo)
    assert gap > 0.3, f"the two closed forms are {gap:.0%} of the axis apart at l = 50"
    labels = [t.get_text() for t in sum_ax.get_legend().get_texts()]
    assert "closed form with (l+1)/(4l)" in labels and "closed form with (l+1)/(2l)" in labels
    assert "mean task (closed form 0): test MSE <= 3e-15" in fig.get_suptitle()
    for ax in (a for a in fig.axes if a.get_title() in ("length task", "sum task")):
        assert min(ax.get_ylim()) > -1 and _l_train_ticks(ax)[1] == [10.0]
        _check_legend_outside(fig, ax)


@pytest.mark.parametrize("lt", [9, 10])
def test_theory_closed_form_line_is_continuous_for_any_l_train(lt):
    # for an odd l_train the length task's closed form (l - (l_train+1)/2)^2 is exactly 0 at a test length: on the
    # log value axis that point was dropped and the dashed line broke off at both neighbours (a gap over 2 lengths)
    l = np.arange(1, 31)
    want = (l - (lt + 1) / 2) ** 2  # the closed form, written out here
    curve = {"lengths": list(l), "l_train": lt, "mse": [want + 1e-3, want + 2e-3]}
    fig = draw(theory_figure({"length": curve, "sum": curve}))
    ax = next(a for a in fig.axes if a.get_title() == "length task")
    (line,) = [ln for ln in ax.get_lines() if ln.get_linestyle() == "--" and ln.get_label().startswith("closed form")]
    x, y = np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)
    lo, hi = ax.get_ylim()
    assert ax.get_yscale() == "log" and list(x) == list(l)  # every plotted length, none dropped
    assert np.all((y >= lo) & (y <= hi)), y  # every point drawn inside the axes: the line runs unbroken
    shown = np.isfinite(ax.transData.transform(np.column_stack([x, y]))).all()
    assert shown and np.allclose(y[want > 0], want[want > 0]) and np.all(y[want == 0] == lo)
    assert ("(its 0 on the bottom edge)" in line.get_label()) == (lt % 2 == 1)


def test_paper_figure_says_which_curve_lost_points_to_nan_or_inf():
    # a NaN curve stayed in the legend with no line, an inf point was dropped, both without a word (an audit)
    l = np.arange(1, 11)
    data = {"NoPE": {"lengths": list(l), "l_train": 5, "mse": [np.full(10, np.nan)] * 2},
            "ALiBi": {"lengths": list(l), "l_train": 5, "mse": [np.where(l == 9, np.inf, 1e-3 * l)] * 2},
            "RoPE": {"lengths": list(l), "l_train": 5, "mse": [1e-3 * l] * 2}}
    ax = draw(paper_figure("1b", data)).axes[0]
    shown = [t.get_text() for t in ax.get_legend().get_texts()][:3]  # then the band's and l_train's entries
    assert shown == ["NoPE (no finite value below 1e+100: not drawn)",
                     "ALiBi (1 length without a finite value below 1e+100, not drawn)", "RoPE"], shown
    # one seed of two overflowed (inf, and 1e267 from an OutRep inverse's expm1): the figure ended in matplotlib's
    # OverflowError after every run had trained; those lengths are left out of the mean and the band, and said
    data["ALiBi"]["mse"] = [1e-3 * l, np.where(l == 9, np.inf, np.where(l == 10, 1e267, 1e-3 * l))]
    ax = draw(paper_figure("1b", data)).axes[0]
    assert ax.get_ylim()[1] < 1 and "ALiBi (2 lengths without a finite value below 1e+100" in [
        t.get_text() for t in ax.get_legend().get_texts()][1]


def test_paper_figure_draws_a_curves_exact_zeros_on_the_bottom_edge():
    # NoPE's MSE exactly 0 up to l_train: the log axis dropped those points and its curve came in from below the
    # axes at l = 21, without a word (an audit)
    l = np.arange(1, 41)
    nope = [np.where(l <= 20, 0.0, 1e-3 * (l - 20)) for _ in range(3)]
    data = {"NoPE": {"lengths": list(l), "l_train": 20, "mse": nope},
            "RoPE": {"lengths": list(l), "l_train": 20, "mse": [1e-4 * l ** 1.5 * (1 + 0.1 * s) for s in range(3)]}}
    ax = draw(paper_figure("1a", data)).axes[0]
    (line,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("NoPE")]
    y, lo = np.asarray(line.get_ydata(), float), ax.get_ylim()[0]
    assert np.all(y[:20] == lo) and np.allclose(y[20:], 1e-3 * (l[20:] - 20)) and "(its 0 on the bottom edge)" in \
        line.get_label()
    assert "(its 0" in [t.get_text() for t in ax.get_legend().get_texts()][0]
    (rope,) = [ln for ln in ax.get_lines() if ln.get_label().startswith("RoPE")]
    assert rope.get_label() == "RoPE"  # no zero: its label as it was


def test_probe_figures_label_l_train_and_chance_and_keep_legends_off_the_lines():
    row = {"l_train": 6, "chance": 0.5}
    parity = {"K_train=1": {**row, "k_train": 1, "acc_mean": {"1,3": 0.9, "1,12": 0.7, "2,3": 0.6, "2,12": 0.5}},
              "K_train=2": {**row, "k_train": 2, "acc_mean": {"1,3": 1.0, "1,12": 0.8, "2,3": 0.95, "2,12": 0.55}}}
    fig = draw(probe_figure("parity", parity))
    for ax in fig.axes:
        if ax.get_gid() == L_TRAIN_GID:
            continue
        entries = [t.get_text() for t in ax.get_legend().get_texts()]
        assert "dashed: chance level 0.5" in entries and any("l_train" in e for e in entries)
        assert _l_train_ticks(ax)[1] == [6.0]
        _check_legend_outside(fig, ax)


@pytest.mark.parametrize("name", ["parity", "planted", "scratchpad"])
def test_probe_figures_keep_coinciding_lines_visible(name):
    # docs/synthetic/fig_scratchpad.png: 'scratchpad, RoPE' and 'scratchpad, RoPE + PoSE' are both 0 past l_train, and
    # every line was drawn alike ('o-', one width, filled markers): the later hid the earlier there; the reference:
    # matplotlib's own lines and marker positions (plot_helpers.check_every_series_visible)
    lengths = (5, 10, 20, 40)
    same = {n: 1.0 if n <= 10 else 0.0 for n in lengths}
    if name == "parity":  # two sparsities k with the same accuracy at every length
        table = {"K_train=2": {"l_train": 10, "k_train": 2, "chance": 0.5,
                               "acc_mean": {f"{k},{n}": v for k in (1, 2) for n, v in same.items()}}}
    else:
        groups = ("answer", "exact") if name == "scratchpad" else (2,)
        labels = ("scratchpad, RoPE", "scratchpad, RoPE + PoSE") if name == "scratchpad" else ("k=2, spread",
                                                                                               "k=3, spread")
        acc = {f"{g},{n}": v for g in groups for n, v in same.items()}
        table = {lab: {"l_train": 10, "chance": 0.5, "acc_mean": acc} for lab in labels}
    fig = draw(probe_figure(name, table))
    panels = [ax for ax in fig.axes if ax.get_gid() != L_TRAIN_GID]
    assert [ax.get_title() for ax in panels] == {"parity": ["K_train=2"], "planted": ["spread"],
                                                  "scratchpad": ["final answer", "whole scratchpad"]}[name]
    for ax in panels:
        check_every_series_visible(ax, fig)


def test_quick_synthetic_figures_say_so():
    syn = draw(paper_figure("4", _coinciding(["l_train = 6", "l_train = 10"], 16), quick=True))
    assert QUICK_MARK in syn.get_suptitle()
    inside_figure(syn, syn._suptitle)
    table = {f"K_train={k}": {"l_train": 6, "k_train": k, "acc_mean": {"1,3": 1.0, "1,6": 0.9, "1,12": 0.6}}
             for k in (1, 2)}  # the quick parity figure: two panels
    probe = draw(probe_figure("parity", table, quick=True))
    assert QUICK_MARK in probe.get_suptitle()
    inside_figure(probe, probe._suptitle)


def test_synthetic_replot_from_csv(tmp_path):
    base = {"task": "length", "l_train": 6, "l_test": 16}
    record = {"base_config": base, "quick": True, "seeds": [0, 1], "l_train": {"l_train = 6": 6, "l_train = 10": 10}}
    (tmp_path / "summary.json").write_text(json.dumps({"meta": {"base_config": base, "quick": True,
                                                                "figures": {"4": record}}}))
    rows = ["figure,curve,seed,length,test_mse"]
    rows += [f"4,l_train = {lt},{s},{n},{0.01 * n * n}" for lt in (6, 10) for s in (0, 1) for n in range(1, 17)]
    (tmp_path / "fig4.csv").write_text("\n".join(rows) + "\n")
    written = replot_figures(["4"], str(tmp_path))
    assert written == [str(tmp_path / "fig4.png")] and (tmp_path / "fig4.png").stat().st_size > 0
    with pytest.raises(ValueError, match="fig1b.csv"):
        replot_figures(["1b"], str(tmp_path))


def test_synthetic_figures_without_matplotlib_are_refused_in_one_line(tmp_path, monkeypatch, capsys):
    # --replot (and a --figure run, after training) ended in ModuleNotFoundError's traceback; now one line, exit 2,
    # before anything is read, trained or written
    import sys

    from torchtune_longshort.synthetic.__main__ import main

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    for argv in (["--figure", "4", "--replot", "--out", str(tmp_path)],
                 ["--figure", "4", "--quick", "--out", str(tmp_path / "new")]):
        assert main(argv) == 2
        err = capsys.readouterr().err
        lines = [x for x in err.splitlines() if x.strip()]
        assert len(lines) == 1 and "matplotlib cannot be imported" in lines[0] and "`pip install matplotlib`" in err
    assert list(tmp_path.iterdir()) == []
