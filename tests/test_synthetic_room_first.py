"""The synthetic command asks its disk for room before anything trains: a full --out (or --cache) was found only
when the first file was written, after every run had trained (~20 s for --figure 1a --quick on a 0 B tmpfs, walked).
The full disk is faked as the gguf room test fakes it (``disk_space.room``); the estimates are checked against the
files the command's own writers put on disk (a real run, and the figure writers over stand-in results)."""

from __future__ import annotations

import os
from dataclasses import asdict
from pathlib import Path

import pytest

import torchtune_longshort.synthetic.__main__ as cli
from torchtune_longshort import disk_space
from torchtune_longshort.synthetic import experiments, out_room

PROG = "python -m torchtune_longshort.synthetic: error: "
TINY = ["--quick", "--steps", "1", "--dim", "8", "--heads", "2", "--l-test", "4", "--l-train", "2"]


def _no_training(*a, **kw):
    raise AssertionError("trained on a disk without room")


@pytest.fixture
def full_disk(monkeypatch):
    monkeypatch.setattr(disk_space, "room", lambda path: (0, 64 << 10, Path("/mnt")))
    for name in ("train_run", "run_figures", "run_beyond"):
        monkeypatch.setattr(cli, name, _no_training)


@pytest.mark.parametrize("flags, folder, what", [
    (["--figure", "1a"], "out", "writing the figures"),
    (["--figure", "beyond"], "out", "writing the figures"),
    (["--task", "mean"], "out", "writing run.json"),
])
def test_a_full_disk_is_refused_before_anything_trains(tmp_path, full_disk, capsys, flags, folder, what):
    out = tmp_path / "z" / "fig"
    assert cli.main([*flags, "--quick", "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"{PROG}--out {out}: {what} needs at least "), err
    assert "more than the 0 B free of 64 KiB on /mnt" in err[0] and "name an --out on a disk with room" in err[0]
    assert os.listdir(tmp_path) == []


def test_a_cache_on_a_full_disk_is_refused_before_anything_trains(tmp_path, monkeypatch, capsys):
    out, cache = tmp_path / "fig", tmp_path / "other_disk" / "cache"
    monkeypatch.setattr(disk_space, "room", lambda path: ((0 if "other_disk" in str(path) else 1 << 30), 1 << 30,
                                                          Path("/mnt")))
    monkeypatch.setattr(cli, "run_figures", _no_training)
    assert cli.main(["--figure", "1a", "--quick", "--out", str(out), "--cache", str(cache)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"{PROG}--cache {cache}: storing the runs it does not hold needs at least "), err


def _result(cfg, mse=1.0):  # a stand-in run result of small numbers: each MSE written as '1' in the CSV
    return {"config": asdict(cfg), "steps": 1, "best_val_mse": mse, "test_lengths": list(range(1, cfg.l_test + 1)),
            "test_mse": [mse] * cfg.l_test, "test_mse_f": [mse] * cfg.l_test, "seconds": 0.0}


def test_a_single_runs_estimate_bounds_what_a_real_run_writes(tmp_path):
    """``--steps 5 --out s1`` wrote a 4085-byte run.json that the estimate put at 733 bytes (config and test lengths
    alone): a disk with room for the estimate filled at the write, after training. The reference: os.walk and
    os.path.getsize over what a real run wrote."""
    out, flags = tmp_path / "run", TINY
    assert cli.main(["--task", "mean", *flags, "--out", str(out)]) == 0
    written = sum(os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(out) for f in files)
    base, _ = cli._base_config(cli._parser().parse_args(["--task", "mean", *flags]))
    assert written <= out_room.single_run_bytes(base) <= 3 * written, written


def test_the_figures_estimate_is_at_most_what_they_write(tmp_path, monkeypatch):
    def worker(cfg):
        return {**_result(cfg, 1.0 + cfg.l_train), "misalignment": {str(L): {"model_f": 0.0}
                                                                     for L in sorted({cfg.l_train, cfg.l_test})}}

    monkeypatch.setattr(experiments, "_worker", worker)
    out, cache = tmp_path / "fig", tmp_path / "cache"
    a = cli._parser().parse_args(["--figure", "1a,4", "--l-trains", "2,3", "--lrs", "1e-3,1e-2", *TINY])
    base, _ = cli._base_config(a)
    paper, seeds, l_trains, lrs = ["1a", "4"], range(2), [2, 3], [1e-3, 1e-2]
    experiments.run_figures(paper, str(out), base, seeds=seeds, workers=1, l_trains=l_trains, cache_dir=str(cache),
                            lrs=lrs)
    configs = out_room.figure_configs(paper, base, seeds, l_trains, lrs)
    written = {f: (out / f).stat().st_size for f in os.listdir(out)}
    for n in paper:  # each MSE written in one character: the CSV is as estimated, byte for byte
        assert out_room.figure_csv_bytes(n, base, seeds, l_trains) == written[f"fig{n}.csv"]
        assert out_room.SMALLEST_PNG < written[f"fig{n}.png"]
    runs = out_room.paper_bytes(paper, base, seeds, l_trains, configs) - out_room.paper_bytes(paper, base, seeds,
                                                                                              l_trains, [])
    assert 0 < runs <= written["runs.json"]
    assert len(os.listdir(cache)) == len(configs)  # every run it counts is one the command stores
    assert 0 < out_room.cache_bytes(configs, str(tmp_path / "empty")) <= sum(
        f.stat().st_size for f in cache.iterdir())
    assert out_room.cache_bytes(configs, str(cache)) == 0  # a run the cache holds is not written again
