"""The synthetic command refuses bad input in one line (exit 2) before anything trains or is written: each case here
ended in a traceback before (some only after other runs of a ``--figure`` had trained, leaving an empty ``--out``)."""

import re

import numpy as np
import pytest

from torchtune_longshort.synthetic.__main__ import main
from torchtune_longshort.synthetic.train import RunConfig

PREFIX = "python -m torchtune_longshort.synthetic: error: "


@pytest.mark.parametrize("argv, needle", [
    # a target of 0 outside OutRep's domain: a ValueError traceback from train_run, after the model was built
    (["--task", "sum", "--outrep", "log"], "--outrep='log' needs targets in y > 0, but --task='sum' has a target of 0"),
    (["--task", "mean", "--outrep", "inv"], "--outrep='inv' needs targets in y > 0, but --task='mean'"),
    (["--task", "sum", "--outrep", "inv_log1p", "--bits", "uniform_ones"], "--outrep='inv_log1p' needs targets"),
    # sizes the model constructors refused, in a traceback
    (["--dim", "30"], "--dim=30 must be divisible by --heads=4"),
    (["--heads", "3", "--dim", "36", "--pe", "alibi"], "--heads=3: ALiBi's slopes need a power of 2 heads"),
    (["--dim", "12", "--pe", "rope"], "--dim=12 / --heads=4 = 3: RoPE needs an even head dim"),
    (["--dim", "0"], "--dim=0 must be >= 1"),
    (["--layers", "0"], "--layers=0 must be >= 1"),
    (["--heads", "0"], "--heads=0 must be >= 1"),
    # --figure: the ALiBi curve's size failed only after the other PEs had trained, in an empty --out
    (["--figure", "1b", "--quick", "--heads", "3", "--dim", "36"], "figure 1b (ALiBi): --heads=3: ALiBi's slopes"),
    (["--figure", "1a", "--quick", "--dim", "12", "--heads", "4"], "figure 1a (RoPE): --dim=12 / --heads=4 = 3"),
    # no length beyond l_train: the theory claim crashed after all training, the others were written as NaN
    (["--figure", "1b,theory", "--quick", "--l-test", "6"], "figure 1b (NoPE): --l-test=6 must be > --l-train=6"),
    (["--figure", "theory", "--quick", "--l-test", "6"], "figure theory (mean): --l-test=6 must be > --l-train=6"),
    (["--figure", "4", "--quick", "--l-trains", "6,16"], "--l-trains value 16 must be in [1, --l-test - 1 = 15]"),
    # one l_train: Fig. 4's trend claim ("strictly decreases as l_train grows") printed 'claim held' over one curve
    (["--figure", "4", "--quick", "--l-trains", "6"], "--l-trains='6': Fig. 4 compares the error of two or more"),
    (["--figure", "4", "--quick", "--l-trains", "6,6"], "--l-trains='6,6': Fig. 4 compares the error of two or more"),
    # the messages named the field (seeds=0), not the flag typed
    (["--figure", "1a", "--seeds", "0"], "--seeds=0 must be >= 1"),
    (["--figure", "1a", "--workers", "0"], "--workers=0 must be >= 1"),
    (["--figure", "1x"], "--figure='1x' is unknown"),
    (["--figure", "1a", "--lrs", "1e-4,-1"], "--lrs='1e-4,-1': every learning rate must be finite and > 0"),
    # a traceback once training had started; an overflow in torch.manual_seed; nothing run, nothing said, exit 0
    (["--figure", "1a", "--lrs", "inf"], "--lrs='inf': every learning rate must be finite and > 0"),
    (["--seed", "99999999999999999999"], "--seed=99999999999999999999 must be in [0, 2**63)"),
    # flags nothing reads: the linear model trained with --pe rope recorded in run.json; --replot said "redrew"
    (["--model", "linear", "--pe", "rope", "--heads", "2"], "--pe, --heads apply to --model transformer: the "
                                                              "linear-attention model (App. C.1) has no positional"),
    (["--figure", "1b", "--replot", "--lrs", "1,2"], "--steps, --lrs apply to training, and --replot trains nothing"),
    (["--figure", ","], "--figure=',' names no figure"),
    # the beyond figures fix their own runs: --steps (added below to every case) trained nothing shorter
    (["--figure", "parity", "--quick"], "--steps applies to the paper's figures (all, 1a, ..., theory), not to the "
                                        "beyond figures"),
    (["--figure", "4", "--l-trains", "6,x"], "--l-trains='6,x' must be a comma list of integers"),
    # only Fig. 4 reads --l-trains: '--figure 1a --l-trains 3,5' trained 1a at --l-train and said nothing
    (["--figure", "1a", "--quick", "--l-trains", "3,5"], "--l-trains sets the l_train values of Fig. 4's curves, "
                                                          "and --figure 1a does not draw Fig. 4"),
    (["--figure", "1b,theory", "--l-trains", "3,5"], "and --figure 1b,theory does not draw Fig. 4"),
    # an empty value (an unset shell variable) trained at --lr without a search / at the default l_trains, silently
    (["--figure", "1a", "--quick", "--lrs", ""], "--lrs='' must be a comma list of numbers"),
    (["--figure", "4", "--quick", "--l-trains", ""], "--l-trains='' must be a comma list of integers"),
    # a test set past the machine's memory: the allocator's traceback (a learned PE's table), or the kernel's kill
    (["--l-test", "1000000000", "--pe", "learned"], "--l-test=1000000000's test set (100 sequences of every length "
                                                    "1..1000000000) takes about 2,980,232,244,730.0 GiB, more than the"),
    (["--figure", "1a", "--workers", "2", "--l-test", "100000000"], "in each of 2 workers) takes about 59,604,"),
])
def test_bad_input_is_refused_in_one_line_before_anything_is_written(tmp_path, capsys, argv, needle):
    out = tmp_path / "out"
    assert main(argv + ["--steps", "2", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(PREFIX) and needle in err, err
    assert not out.exists()


def test_all_and_beyond_stand_for_their_figures_also_in_a_list():
    # 'all,beyond' was refused as "--figure='all' is unknown; accepted: ..., all, beyond"
    from torchtune_longshort.synthetic.__main__ import _figure_names
    from torchtune_longshort.synthetic.experiments import PAPER_FIGURES
    from torchtune_longshort.synthetic.sparsity_probes.figures import BEYOND_FIGURES
    assert _figure_names("all,beyond") == list(PAPER_FIGURES) + list(BEYOND_FIGURES)
    assert _figure_names("1c,all,parity") == ["1c"] + [f for f in PAPER_FIGURES if f != "1c"] + ["parity"]
    assert _figure_names("beyond") == list(BEYOND_FIGURES)


def test_a_positive_outrep_is_accepted_on_the_length_task():
    RunConfig(task="length", outrep="log").validate()
    RunConfig(task="sum", outrep="sqrt").validate()
    RunConfig(model="linear", dim=30, num_heads=4).validate()  # the App. C.1 model has no heads


@pytest.mark.parametrize("field, value, needle", [
    ("l_test", 16.0, "l_test=16.0 must be an integer"),  # passed validate(), failed in torch after training
    ("l_train", 6.5, "l_train=6.5 must be an integer"),
    ("batch_size", True, "batch_size=True must be an integer"),
    ("seed", "0", "seed='0' must be an integer"),
    ("lr", float("inf"), "lr=inf must be a finite number"),  # reported as a divergence at step 1
    ("task", 3, "task=3 must be a string"),
])
def test_a_field_of_the_wrong_kind_is_refused_by_validate_naming_it(field, value, needle):
    with pytest.raises(ValueError, match=f"^{re.escape(needle)}$"):
        RunConfig(**{"task": "length", "l_train": 6, "l_test": 16, field: value}).validate()


def test_fig4_l_trains_are_checked_only_for_fig4(tmp_path, capsys):
    # `--figure 1b --l-test 25` was refused over Fig. 4's default l_trains (30), which nobody asked for
    argv = ["--figure", "1b", "--l-test", "25", "--l-train", "3", "--steps", "1", "--seeds", "1", "--dim", "8",
            "--heads", "2", "--workers", "1", "--out", str(tmp_path / "o")]
    assert main(argv) == 0, capsys.readouterr().err
    assert (tmp_path / "o" / "fig1b.csv").exists()


def test_a_diverging_learning_rate_ends_in_one_line_at_the_step_it_diverges(tmp_path, capsys):
    # `--lr 1e4`: a FloatingPointError traceback (exit 1), raised only at the next validation (step 50 by default)
    out = tmp_path / "one"
    assert main(["--lr", "1e4", "--steps", "50", "--dim", "8", "--heads", "2", "--l-test", "12", "--out", str(out)]) == 2
    # the last line, after what the progress bar's close wrote before it (a cursor-up and spaces, when it had drawn)
    err = capsys.readouterr().err.splitlines()[-1]
    err = err[err.index(PREFIX):] if PREFIX in err else err
    assert err.startswith(PREFIX + "training diverged at step ") and "at lr=10000" in err, err
    assert int(err.split("at step ")[1].split(":")[0]) < 50 and not out.exists()
    out = tmp_path / "fig"  # and in a figure's run, without a traceback either
    assert main(["--figure", "1a", "--quick", "--lr", "1e4", "--seeds", "1", "--dim", "8", "--heads", "2",
                 "--out", str(out)]) == 2
    assert "training diverged at step " in capsys.readouterr().err and not out.exists()  # no empty --out either


# at their defaults too (`--task length` passed the check, which compared values, and was ignored: a docs audit)
@pytest.mark.parametrize("flag, value", [("--task", "sum"), ("--pe", "rope"), ("--outrep", "log"), ("--seed", "3"),
                                         ("--task", "length"), ("--seed", "0"), ("--tas", "length")])
def test_figure_refuses_the_flags_of_a_single_run(tmp_path, capsys, flag, value):
    # `--figure 1b --pe rope` trained all four PEs as if --pe had not been given (and `--task sum --outrep log`
    # was refused over an OutRep domain no figure's curve used)
    assert main(["--figure", "1b", "--quick", flag, value, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and " applies to a single run (without --figure)" in err, err
    assert not (tmp_path / "o").exists()


def test_theory_title_says_float32_zero_only_when_it_is():
    # the quick run's title said "test MSE <= 3e-09 ... (float32 zero)"
    from torchtune_longshort.synthetic.figures import theory_figure

    x = list(range(1, 9))
    curve = {"lengths": x, "l_train": 4, "mse": [np.array(x, dtype=float)]}
    for mean_mse, zero in ((3e-9, False), (5e-15, True)):
        fig = theory_figure({"length": curve, "sum": curve, "mean": {**curve, "mse": [np.full(8, mean_mse)]}})
        assert ("(float32 zero)" in fig._suptitle.get_text()) == zero


@pytest.mark.parametrize("flag, value", [("--lrs", "1e-3,1e-4"), ("--l-trains", "6,10"), ("--seeds", "2"),
                                         ("--workers", "2"), ("--cache", "CACHE")])
def test_a_single_run_refuses_the_flags_only_figures_read(tmp_path, capsys, flag, value):
    # `--task length --lrs 1e-3,1e-4` trained one run at --lr's default, 5e-4, without a word (an audit)
    value = value.replace("CACHE", str(tmp_path / "cache"))
    assert main(["--task", "mean", "--quick", "--steps", "2", flag, value, "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: {flag} applies with --figure only" in err, err
    assert not (tmp_path / "o").exists() and not (tmp_path / "cache").exists()


def test_a_cache_folder_that_takes_no_new_file_is_refused_before_training(tmp_path, capsys, monkeypatch):
    # an existing --cache folder that was read-only (chattr +i, a read-only mount) ended in a PermissionError
    # traceback at the first run's entry, after that run had trained
    import torchtune_longshort.config.values as values
    cache, out, probe = tmp_path / "cache", tmp_path / "o", values._refuses_new_folder
    cache.mkdir()
    monkeypatch.setattr(values, "_refuses_new_folder", lambda f: "Read-only file system" if f == cache else probe(f))
    assert main(["--figure", "1a", "--quick", "--steps", "2", "--cache", str(cache), "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"error: --cache={str(cache)!r} does not take new files" in err, err
    assert not out.exists() and not any(cache.iterdir())


def test_a_cache_folder_that_takes_no_new_file_reaches_the_runs_which_may_only_read_it(tmp_path, monkeypatch):
    # 8c6ea9b refused such a folder before looking at what it held: a rerun whose every run it holds (read, nothing
    # stored) was refused too. It is asked once a run is to be stored (test_synthetic_cache: before that run trains)
    import torchtune_longshort.config.values as values
    import torchtune_longshort.synthetic.__main__ as cli

    class Reached(Exception):
        pass

    def run_figures(*args, **kwargs):
        raise Reached(kwargs["cache_dir"])

    cache, probe = tmp_path / "cache", values._refuses_new_folder
    cache.mkdir()
    monkeypatch.setattr(values, "_refuses_new_folder", lambda f: "Read-only file system" if f == cache else probe(f))
    monkeypatch.setattr(cli, "run_figures", run_figures)
    with pytest.raises(Reached, match=re.escape(str(cache))):
        main(["--figure", "1a", "--quick", "--steps", "2", "--cache", str(cache), "--out", str(tmp_path / "o")])


@pytest.mark.parametrize("bits", ["iid", "uniform_ones"])
def test_the_test_sets_bytes_are_a_floor_on_what_building_it_holds(bits):
    """The refusal above compares ``test_batch_bytes`` with the free memory: it must not exceed what building the
    test set holds at its peak (torch's allocator events), or a run that fits would be refused; nor fall far below."""
    import torch

    from benchmarks.tensor_memory import PeakTensorMemory
    from torchtune_longshort.synthetic.tasks import eval_lengths, make_batch
    from torchtune_longshort.synthetic.train import test_batch_bytes

    cfg = RunConfig(l_test=200, test_per_length=100, bits=bits)
    with PeakTensorMemory() as mem:
        make_batch(eval_lengths(cfg.l_test, cfg.test_per_length), "sum", torch.Generator().manual_seed(0), bits)
    assert 0.8 * mem.peak_bytes <= test_batch_bytes(cfg) <= mem.peak_bytes  # measured 4.10x / 4.59x the tokens
