"""The study checks its output folder before it fetches a ``pypi:`` base: with ``--out`` a file, or a folder holding
a user's files, the shipped ``study/gpu_smollm2.yaml --quick`` under a fresh HOME fetched and converted SmolLM2 into
``~/.cache/torchtune_longshort`` (a minute and more, ~0.5 GB) as its config was read, and only then refused the
folder. Now the refusal comes first (the config read without fetching, as Table 1 reads it) and HOME stays empty."""

from __future__ import annotations

import pytest

import torchtune_longshort.study.__main__ as study_main
import torchtune_longshort.study.base_config as base_config


def _never_fetch(name, *args, **kwargs):
    raise AssertionError(f"pypi model {name!r} fetched before the output folder was checked")


@pytest.mark.parametrize("users", ["notes.txt", None])
def test_the_out_folder_is_refused_before_the_pypi_base_is_fetched(tmp_path, monkeypatch, capsys, users):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    for var in ("LONGSHORT_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(base_config, "pypi_model", _never_fetch)
    out = cwd / "o"
    if users:  # a folder of the user's own files
        out.mkdir(parents=True)
        (out / users).write_text("mine\n")
    else:  # a file where the folder goes
        cwd.mkdir()
        out.write_text("a file\n")
    monkeypatch.chdir(cwd)
    assert study_main.main(["--config", "study/gpu_smollm2.yaml", "--quick", "--out", "o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and repr(str(out)) in err[0], err
    assert list(home.iterdir()) == []  # nothing fetched, no cache folder, no lock
    assert sorted(p.name for p in out.iterdir()) == [users] if users else out.read_text() == "a file\n"
