"""The study and Table 1 check their output folder before they fetch a ``pypi:`` model: with that folder holding a
user's files (or being a file), the shipped configs under a fresh HOME fetched and converted SmolLM2 into
``~/.cache/torchtune_longshort`` (a minute and more, ~0.5 GB) as the config was read, and only then refused the
folder. Now the refusal (one line, exit 2) comes first and HOME stays empty. The study's is ``--out``; Table 1's,
without ``--out``, the config's own ``output_dir``."""

from __future__ import annotations

import pytest

import torchtune_longshort.study.__main__ as study_main
import torchtune_longshort.study.base_config as base_config
import torchtune_longshort.study.table1.__main__ as table1_main


def _never_fetch(name, *args, **kwargs):
    raise AssertionError(f"pypi model {name!r} fetched before the output folder was checked")


def _fresh_home_and(out_rel, tmp_path, monkeypatch, users):
    """A fresh HOME, the fetch made to fail loudly, and at ``cwd/out_rel`` a folder holding the user's file
    ``users`` (or, ``users`` None, a file where the folder goes); the current directory is ``cwd``."""
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    for var in ("LONGSHORT_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(base_config, "pypi_model", _never_fetch)
    out = cwd / out_rel
    if users:
        out.mkdir(parents=True)
        (out / users).write_text("mine\n")
    else:
        out.parent.mkdir(parents=True)
        out.write_text("a file\n")
    monkeypatch.chdir(cwd)
    return home, out


def _left_as_it_was(home, out, users):
    assert list(home.iterdir()) == []  # nothing fetched, no cache folder, no lock
    assert sorted(p.name for p in out.iterdir()) == [users] if users else out.read_text() == "a file\n"


@pytest.mark.parametrize("users", ["notes.txt", None])
def test_the_studys_out_is_refused_before_the_pypi_base_is_fetched(tmp_path, monkeypatch, capsys, users):
    home, out = _fresh_home_and("o", tmp_path, monkeypatch, users)
    assert study_main.main(["--config", "study/gpu_smollm2.yaml", "--quick", "--out", "o"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and repr(str(out)) in err[0], err
    _left_as_it_was(home, out, users)


@pytest.mark.parametrize("users", ["notes.txt", None])
def test_table1s_own_output_dir_is_refused_before_the_pypi_model_is_fetched(tmp_path, monkeypatch, capsys, users):
    # the config's output_dir, its quick variant
    home, out = _fresh_home_and("outputs/study/table1_smollm2_quick", tmp_path, monkeypatch, users)
    with pytest.raises(SystemExit) as stop:
        table1_main.main(["--config", "study/table1_smollm2.yaml", "--quick"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "table1_smollm2_quick" in err[0], err
    _left_as_it_was(home, out, users)
