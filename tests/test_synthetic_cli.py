"""End-to-end: the command writes every promised file, and its numbers agree with the closed forms where those exist."""

import csv
import json
import os
import sys

import numpy as np
import pytest
from plot_helpers import assert_png_drawn
from synthetic_helpers import csv_mean_accuracy

from torchtune_longshort.synthetic.__main__ import main
from torchtune_longshort.synthetic.theory import length_error_closed_form


@pytest.mark.slow
def test_quick_paper_figures_end_to_end(tmp_path):
    out = tmp_path / "syn"
    assert main(["--figure", "1b,theory", "--quick", "--out", str(out)]) == 0
    for f, size in (("fig1b.png", (7.2, 3.4)), ("figtheory.png", (9.0, 4.2))):  # the legend beside / under
        assert_png_drawn(out / f, *size, 90)
    s = json.loads((out / "summary.json").read_text())
    runs = json.loads((out / "runs.json").read_text())
    assert len(runs) == 4 * 2 + 3 * 2  # 1b: 4 PEs x 2 seeds; theory: 3 tasks x 2 seeds
    assert len(list(csv.DictReader(open(out / "figtheory.csv")))) == 3 * 2 * 16
    # quick: l_train 6, l_test 16; the trained linear-attention model must sit on Theorem 3.1's curve
    th = s["theory_linear_attention"]["length"]
    assert th["closed_form_at_l_test"] == float(length_error_closed_form(16, 6))
    assert np.mean(th["trained_at_l_test"]) == pytest.approx(th["closed_form_at_l_test"], rel=0.1)
    # CSV rows: 4 PEs x 2 seeds x 16 lengths, MSE recomputable as numbers
    rows = list(csv.DictReader(open(out / "fig1b.csv")))
    assert len(rows) == 4 * 2 * 16 and all(float(r["test_mse"]) >= 0 for r in rows)
    assert set(s["length_rises_for_every_pe"]["per_pe"]) == {"NoPE", "learned abs.", "ALiBi", "RoPE"}


@pytest.mark.slow
def test_quick_beyond_end_to_end(tmp_path):
    out = tmp_path / "beyond"
    assert main(["--figure", "parity", "--quick", "--seeds", "1", "--out", str(out)]) == 0
    s = json.loads((out / "beyond_summary.json").read_text())
    assert set(s["parity"]) == {"K_train=1", "K_train=2"}
    assert_png_drawn(out / "fig_parity.png", 2.6 * 2, 3.9, 90)  # a panel per K_train, legends under them
    from_csv = csv_mean_accuracy(out / "fig_parity.csv", "parity")
    assert set(from_csv) == set(s["parity"])
    for curve, acc in from_csv.items():  # one seed: the summary's means are the CSV's accuracies (4 decimals)
        assert acc == pytest.approx(s["parity"][curve]["acc_mean"], abs=5.01e-5)


def test_single_run_writes_json(tmp_path):
    out = tmp_path / "one"
    assert main(["--task", "mean", "--quick", "--steps", "5", "--dim", "8", "--heads", "2", "--out", str(out)]) == 0
    r = json.loads((out / "run.json").read_text())
    assert len(r["test_mse"]) == 16 and r["config"]["task"] == "mean"
    assert r["provenance"]["device"]["type"] == "cpu" and "stdlib_corpus" not in r["provenance"]
    assert main(["--task", "mean", "--quick", "--steps", "5", "--dim", "8", "--heads", "2", "--seed", "1", "--out",
                 str(out)]) == 0  # an earlier run's run.json is replaced
    assert json.loads((out / "run.json").read_text())["config"]["seed"] == 1


def test_single_runs_line_says_its_validation_mse_is_of_f(tmp_path, capsys):
    # with --outrep the validation MSE (of f(y)) stood unlabelled beside the test MSEs (of y)
    argv = ["--task", "length", "--quick", "--steps", "2", "--dim", "8", "--heads", "2", "--out", str(tmp_path / "o")]
    assert main(argv + ["--outrep", "sqrt"]) == 0
    assert " (of f(y), --outrep sqrt) test_mse@l_train=" in capsys.readouterr().out


@pytest.mark.parametrize("argv", [["--out", ""], ["--out=", "--quick"], ["--figure", "1b", "--quick", "--cache", " "]])
def test_an_empty_path_is_refused_in_one_line_naming_its_flag(argv, tmp_path, monkeypatch, capsys):
    # `--out ""` (an unset $OUT) ended in FileNotFoundError's traceback, exit 1; now argparse's refusal, exit 2
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        main(argv)
    err = capsys.readouterr().err
    flag = argv[argv.index("--cache") if "--cache" in argv else 0].rstrip("=")
    assert stop.value.code == 2 and err.count("\n") == 1 and f"error: argument {flag}: " in err, err
    assert "is an empty path: give a file or folder" in err and not any(tmp_path.iterdir())


def test_single_run_refuses_a_users_run_json_before_training(tmp_path, capsys):
    # `--out DIR` holding the user's own run.json: it was overwritten after training; now refused in one line
    # (exit 2) before anything trains (an earlier run's run.json is replaced: test_single_run_writes_json).
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "run.json").write_text('{"mine": 1}')
    assert main(["--task", "mean", "--quick", "--steps", "5", "--dim", "8", "--heads", "2", "--out", str(mine)]) == 2
    err = capsys.readouterr().err  # one line, as every entry point refuses (refusals.py): it began "error: "
    assert err.count("\n") == 1 and err.startswith("python -m torchtune_longshort.synthetic: error: --out=")
    assert "run.json" in err
    assert (mine / "run.json").read_text() == '{"mine": 1}' and sorted(p.name for p in mine.iterdir()) == ["run.json"]
    assert main(["--out", str(mine / "run.json")]) == 2 and "is a file, not a folder" in capsys.readouterr().err
    assert main(["--out", str(tmp_path / "new.json")]) == 2
    assert "e.g. " + str(tmp_path / "new") in capsys.readouterr().err
    assert not (tmp_path / "new.json").exists()


def test_lr_search_keeps_the_run_with_the_lowest_validation_mse_and_lists_every_rates_run(tmp_path):
    # `--lrs` with the default lr (5e-4) in the grid: when the other rate won, the chosen run was filed under the
    # default-lr run's key, so runs.json and meta.runs lost the default-lr run (4 runs listed of 8 trained)
    out = tmp_path / "lrs"
    argv = ["--figure", "1a", "--quick", "--seeds", "1", "--steps", "20", "--dim", "8", "--heads", "2",
            "--lrs", "5e-4,3e-3", "--out", str(out)]
    assert main(argv) == 0
    s = json.loads((out / "summary.json").read_text())
    choice = s["meta"]["lr_choice"]
    assert len(choice) == 4 and s["meta"]["lrs"] == [5e-4, 3e-3]  # 4 PEs x 1 seed
    assert s["meta"]["provenance"]["python"]["version"] == "%d.%d.%d" % sys.version_info[:3]
    runs = json.loads((out / "runs.json").read_text())
    rows = list(csv.DictReader(open(out / "fig1a.csv")))
    for key, c in choice.items():
        assert c["val_mse"][str(c["chosen"])] == min(c["val_mse"].values())
        label = key.split(": ")[1]
        # the plotted curve is the chosen run's test MSE
        run = [r for r in runs if r["config"]["lr"] == c["chosen"] and r["config"]["seed"] == 0
               and r["config"]["task"] == "mean" and
               {"NoPE": "nope", "learned abs.": "learned", "ALiBi": "alibi", "RoPE": "rope"}[label] == r["config"]["pe"]]
        assert len(run) == 1
        curve = [float(r["test_mse"]) for r in rows if r["curve"] == label]
        assert curve == pytest.approx(run[0]["test_mse"], rel=1e-5)
    assert {c["chosen"] for c in choice.values()} == {3e-3}  # the case that lost runs
    for listed in (runs, s["meta"]["runs"]):
        assert sorted((r["config"]["pe"], r["config"]["lr"]) for r in listed) == sorted(
            (pe, lr) for pe in ("nope", "learned", "alibi", "rope") for lr in (5e-4, 3e-3))


@pytest.mark.parametrize("bad", ["0,1e-4", "fast"])
def test_lr_search_bad_grid(tmp_path, bad):
    assert main(["--figure", "1a", "--quick", "--lrs", bad, "--out", str(tmp_path)]) == 2


def test_figures_refuse_a_users_files_in_out_before_training(tmp_path, capsys):
    # `--figure 1b --out DIR` with the user's own summary.json / fig1b.png in DIR: both were overwritten after
    # training; now refused in one line (exit 2) before anything trains. Same for the beyond figures' files.
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "fig1b.png").write_text("mine")
    assert main(["--figure", "1b", "--quick", "--out", str(mine)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "fig1b.png" in err and "--out=" in err, err
    (mine / "beyond_summary.json").write_text("[1]")
    assert main(["--figure", "parity", "--quick", "--out", str(mine)]) == 2
    assert "beyond_summary.json" in capsys.readouterr().err
    assert sorted(p.name for p in mine.iterdir()) == ["beyond_summary.json", "fig1b.png"]
    assert (mine / "fig1b.png").read_text() == "mine"


def test_an_earlier_summary_covers_only_the_figures_it_names(tmp_path, capsys):
    # an earlier run's summary.json (of Fig. 1a) in --out made every name the command writes its own: `--figure 5`
    # overwrote the user's fig5.png kept there; likewise a beyond summary of parity and the user's fig_planted.csv
    out = tmp_path / "syn"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps({"meta": {"figures": {"1a": {"quick": True}}}}))
    (out / "beyond_summary.json").write_text(json.dumps({"parity": {}, "meta": {"parity": {}}}))
    for name in ("fig5.png", "fig_planted.csv", "fig1a.png", "fig_parity.csv"):  # the last two: the runs'
        (out / name).write_text("mine")
    small = ["--quick", "--seeds", "1", "--out", str(out)]
    sizes = ["--steps", "5", "--dim", "8", "--heads", "2"]  # the paper's figures' (the beyond figures fix their own)
    for figure, named in (("1a,5", "fig5.png"), ("parity,planted", "fig_planted.csv")):
        assert main(["--figure", figure, *small, *(sizes if figure == "1a,5" else [])]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"holds '{named}', which no earlier run there wrote" in err, err
    assert sorted(p.name for p in out.iterdir()) == ["beyond_summary.json", "fig1a.png", "fig5.png", "fig_parity.csv",
                                                     "fig_planted.csv", "summary.json"]
    assert all((out / n).read_text() == "mine" for n in ("fig5.png", "fig_planted.csv"))


@pytest.mark.parametrize("summary", [{"meta": {}},
                                     {"meta": {"base_config": {}}, "scalar_misalignment": {"1a: NoPE": {}}}])
def test_a_summary_without_figure_records_covers_no_other_figure(tmp_path, capsys, summary):
    # a summary.json with a "meta" but no meta.figures (a user's, or an older run's of Fig. 1a) made every name the
    # command writes its own: `--figure 5` overwrote the user's fig5.png; an older summary covers what it names
    out = tmp_path / "syn"
    out.mkdir()
    (out / "summary.json").write_text(json.dumps(summary))
    (out / "fig5.png").write_text("mine")
    assert main(["--figure", "5", "--quick", "--seeds", "1", "--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    named = "'fig5.png'" if "scalar_misalignment" in summary else "'fig5.png', 'summary.json'"
    assert err.count("\n") == 1 and f"holds {named}, which no earlier run there wrote" in err, err
    assert (out / "fig5.png").read_text() == "mine"


def test_a_cache_that_is_a_file_and_a_replot_of_nothing_are_refused_before_any_write(tmp_path, capsys,
                                                                                     monkeypatch):
    # `--cache FILE`: --out was made, then a 16-line FileExistsError traceback; `--replot` on a missing --out said
    # "[Errno 2] ... summary.json", naming neither the flag nor the fix
    (tmp_path / "afile").write_text("")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.chdir(tmp_path)
    for argv, needle in [(["--figure", "1b", "--quick", "--out", str(tmp_path / "o"), "--cache", str(tmp_path / "afile")],
                          "--cache='" + str(tmp_path / "afile") + "' is a file, not a folder"),
                         # `--cache=~/afile` (no shell expands a tilde after "="): a folder named "~" was made
                         (["--figure", "1b", "--quick", "--out", str(tmp_path / "o"), "--cache=~/afile"],
                          "--cache='" + str(tmp_path / "afile") + "' is a file, not a folder"),
                         (["--figure", "1b", "--replot", "--out", str(tmp_path / "absent")],
                          "--replot redraws the figures a run wrote there"),
                         # an --out that cannot be made: a PermissionError traceback from os.makedirs, exit 1
                         (["--figure", "1b", "--quick", "--out", "/proc/longshort_x"],
                          "--out='/proc/longshort_x' cannot be created"),
                         # a flag's bad value named the run's field ("max_steps=-5 must be >= 1")
                         (["--task", "mean", "--steps", "-5", "--out", str(tmp_path / "o")], "--steps=-5 must be >= 1")]:
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["afile"]


def test_a_run_whose_predictions_overflow_writes_json_any_reader_takes(tmp_path):
    """OutRep inv_log1p's inverse (expm1 of 1/z) overflows for a small positive output: the run's test MSE held inf
    and its misalignment NaN, written as Python's ``Infinity`` / ``NaN``, which JSON does not have (jq, JavaScript
    and Go refuse the file). They are ``null`` now; the line printed still says inf."""
    import numpy as np

    from torchtune_longshort.output_guard import strict_json

    assert json.loads(strict_json({"a": [1.5, float("nan"), float("-inf"), np.float32("inf"), np.float64(2.0)],
                                   "b": (True, 3, None, "x")})) == {"a": [1.5, None, None, None, 2.0],
                                                                    "b": [True, 3, None, "x"]}
    out = tmp_path / "o"
    assert main(["--task", "length", "--outrep", "inv_log1p", "--steps", "1", "--seed", "9", "--dim", "8", "--heads",
                 "2", "--layers", "1", "--out", str(out)]) == 0

    def refuse(c):
        raise ValueError(f"not JSON: {c}")

    run = json.loads((out / "run.json").read_text(), parse_constant=refuse)
    assert None in run["test_mse"] and all(v is None or np.isfinite(v) for v in run["test_mse"])


def test_an_out_that_cannot_be_made_names_its_folder_not_dot(tmp_path, monkeypatch, capsys):
    # `cd /sys && python -m torchtune_longshort.synthetic --task length --steps 2` (default --out synthetic_out) was
    # refused naming "'.' does not take new folders", and `--out afile/x` "'afile' is a file": the folder is named as
    # the working directory makes it (os.path.abspath), as other commands name theirs
    (tmp_path / "afile").write_text("")
    for cwd, argv, folder in [("/proc", ["--task", "length", "--steps", "2"], "/proc"),
                              (str(tmp_path), ["--task", "length", "--steps", "2", "--out", "afile/x"],
                               os.path.abspath(tmp_path / "afile"))]:
        monkeypatch.chdir(cwd)
        assert main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"cannot be created: '{folder}' " in err, err
