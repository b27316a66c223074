"""A synthetic command whose write finds the disk full (0 KiB free) ends in one line, exit 2, and leaves no folder
it made: --out (and the parents it made for it) and --cache are removed where the refused run left them empty;
a folder that was there before stays. The full disk is simulated: the writer raises the ENOSPC OSError naming its
file that a full tmpfs gave (walked on a 64 KiB tmpfs, 0 B free)."""

from __future__ import annotations

import errno
import os

import torchtune_longshort.synthetic.__main__ as cli

SMALL = ["--task", "mean", "--quick", "--steps", "1", "--dim", "8", "--heads", "2"]


def _full(path, *a, **kw):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def _tree(root):
    return sorted(os.path.relpath(os.path.join(d, n), root) for d, ds, fs in os.walk(root) for n in ds + fs)


def test_a_single_run_on_a_full_disk_leaves_no_folder_it_made(tmp_path, monkeypatch, capsys):
    (tmp_path / "kept").mkdir()
    before = _tree(tmp_path)
    monkeypatch.setattr(cli, "atomic_write_text", _full)
    monkeypatch.setattr(cli, "train_run", lambda base, progress: {"model": None, "test_mse": {}})  # trained
    monkeypatch.setattr(cli, "scalar_misalignment", lambda *a, **kw: 0.0)
    out = tmp_path / "kept" / "a" / "run1"
    assert cli.main([*SMALL, "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"no space left on the disk writing {out / 'run.json'}" in err, err
    assert _tree(tmp_path) == before == ["kept"]
    assert cli.main([*SMALL, "--out", str(tmp_path / "kept")]) == 2  # a folder of the user's, empty, stays
    assert _tree(tmp_path) == ["kept"]


def test_a_figure_run_on_a_full_disk_leaves_neither_out_nor_cache(tmp_path, monkeypatch, capsys):
    out, cache = tmp_path / "fig", tmp_path / "c" / "cache"

    def run_figures(paper, out_dir, base, cache_dir=None, **kw):  # makes its folders, then finds no room
        os.makedirs(out_dir)
        os.makedirs(cache_dir)
        _full(os.path.join(cache_dir, "0123.json"))

    monkeypatch.setattr(cli, "run_figures", run_figures)
    assert cli.main(["--figure", "1a", "--quick", "--out", str(out), "--cache", str(cache)]) == 2
    assert "no space left on the disk writing" in capsys.readouterr().err
    assert _tree(tmp_path) == []
