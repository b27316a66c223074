"""``--replot`` draws each figure with its own run's record (l_train per curve, quick), and a later command that
draws other figures into the same folder keeps the earlier figures' claims and records in summary.json."""

import json

from torchtune_longshort.synthetic import experiments
from torchtune_longshort.synthetic.__main__ import main

PREFIX = "python -m torchtune_longshort.synthetic: error: "
TINY = ["--steps", "2", "--seeds", "1", "--dim", "8", "--heads", "2", "--workers", "1"]


def _drawn(monkeypatch) -> dict:
    drawn: dict = {}
    monkeypatch.setattr(experiments, "_plot", lambda name, data, path, quick=False: drawn.setdefault(
        name, ({label: d["l_train"] for label, d in data.items()}, quick)))
    return drawn


def test_replot_draws_each_figure_with_its_own_runs_l_train_and_quick_flag(tmp_path, monkeypatch, capsys):
    # before: every CSV was drawn with the last command's l_train and quick flag (fig1b from a quick run with
    # l_train 6 got a line at 4 and no quick banner), and the second command's summary.json dropped 1b's claims
    out = str(tmp_path / "mix")
    assert main(["--figure", "1b", "--quick", *TINY, "--out", out]) == 0
    assert main(["--figure", "1a", "--l-train", "4", "--l-test", "16", *TINY, "--out", out]) == 0
    s = json.loads((tmp_path / "mix" / "summary.json").read_text())
    assert "length_rises_for_every_pe" in s and "mean_nope_flat" in s
    assert "1b: NoPE" in s["theorem_3_1_quadratic"]["fits"]
    assert {k.split(": ")[0] for k in s["scalar_misalignment"]} == {"1a", "1b"}
    assert sorted(s["meta"]["figures"]) == ["1a", "1b"] and s["meta"]["kept_figures"] == ["1b"]
    drawn = _drawn(monkeypatch)
    assert main(["--figure", "1a,1b", "--replot", "--out", out]) == 0
    assert drawn["1b"] == ({"NoPE": 6, "learned abs.": 6, "ALiBi": 6, "RoPE": 6}, True)
    assert drawn["1a"] == ({"NoPE": 4, "learned abs.": 4, "ALiBi": 4, "RoPE": 4}, False)


def test_replot_refuses_a_figure_without_a_record_or_a_csv_before_drawing_any(tmp_path, monkeypatch, capsys):
    out = tmp_path / "o"
    out.mkdir()
    base = experiments.RunConfig(l_train=2, l_test=4)
    rows = "figure,curve,seed,length,test_mse\n" + "".join(f"1a,NoPE,0,{l},0.5\n" for l in range(1, 5))
    (out / "fig1a.csv").write_text(rows)
    (out / "fig1c.csv").write_text(rows.replace("1a,", "1c,"))
    # an older summary (no meta.figures): its scalar_misalignment names the figures its command drew
    summary = {"meta": {"base_config": vars(base)}, "scalar_misalignment": {"1a: NoPE": {}}}
    (out / "summary.json").write_text(json.dumps(summary))
    drawn = _drawn(monkeypatch)
    for figs, needle in [("1a,1b", "fig1b.csv does not exist"),  # fig1a.png was written before this refusal
                         ("1a,1c", "does not record the run that wrote"),  # 1c was drawn with 1a's l_train
                         ]:
        assert main(["--figure", figs, "--replot", "--out", str(out)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and err.startswith(PREFIX) and needle in err, err
        assert drawn == {}
    (out / "fig1a.csv").write_text(rows + "1a,NoPE,1,1,0.5\n")  # a seed missing lengths: a KeyError traceback
    assert main(["--figure", "1a", "--replot", "--out", str(out)]) == 2
    assert "curve 'NoPE' seed 1 has other lengths than seed 0" in capsys.readouterr().err
    (out / "fig1a.csv").write_text("a,b\n1,2\n")  # said "max() arg is an empty sequence", naming no file
    assert main(["--figure", "1a", "--replot", "--out", str(out)]) == 2
    assert "fig1a.csv is not a figure's CSV" in capsys.readouterr().err
    (out / "fig1a.csv").write_text(rows)
    assert main(["--figure", "1a", "--replot", "--out", str(out)]) == 0 and drawn == {"1a": ({"NoPE": 2}, False)}
