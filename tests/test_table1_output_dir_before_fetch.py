"""Table 1 without ``--out`` checks the config's own ``output_dir`` before it fetches a ``pypi:`` model: with that
folder holding a user's files (or being a file), the shipped ``study/table1_smollm2.yaml`` under a fresh HOME
fetched and converted SmolLM2 into ``~/.cache/torchtune_longshort`` (a minute and more, ~0.5 GB) and only then
refused the folder, exit 2. Now the refusal comes first and HOME stays empty."""

from __future__ import annotations

import pytest

import torchtune_longshort.study.base_config as base_config
import torchtune_longshort.study.table1.__main__ as table1_main


def _never_fetch(name, *args, **kwargs):
    raise AssertionError(f"pypi model {name!r} fetched before the output folder was checked")


@pytest.mark.parametrize("users", ["notes.txt", None])
def test_the_configs_output_dir_is_refused_before_the_pypi_model_is_fetched(tmp_path, monkeypatch, capsys, users):
    home, cwd = tmp_path / "home", tmp_path / "cwd"
    home.mkdir()
    for var in ("LONGSHORT_CACHE", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setattr(base_config, "pypi_model", _never_fetch)
    out = cwd / "outputs" / "study" / "table1_smollm2_quick"  # the config's output_dir, its quick variant
    if users:  # a folder of the user's own files
        out.mkdir(parents=True)
        (out / users).write_text("mine\n")
    else:  # a file where the folder goes
        out.parent.mkdir(parents=True)
        out.write_text("a file\n")
    monkeypatch.chdir(cwd)
    with pytest.raises(SystemExit) as stop:
        table1_main.main(["--config", "study/table1_smollm2.yaml", "--quick"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "table1_smollm2_quick" in err[0], err
    assert list(home.iterdir()) == []  # nothing fetched, no cache folder, no lock
    assert sorted(p.name for p in out.iterdir()) == [users] if users else out.read_text() == "a file\n"
