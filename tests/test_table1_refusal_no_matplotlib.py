"""A refused Table 1 leaves HOME as it was: it asked whether matplotlib imports (``matplotlib_problem``) before
reading its config, and importing matplotlib makes ``~/.config/matplotlib`` and writes
``~/.cache/matplotlib/fontlist-*.json``, so ``--config nope.yaml`` or ``lengths: [-5]`` (exit 2) left both in a
fresh HOME. Matplotlib is now asked after every check of the config, the output folders and the cells."""

from __future__ import annotations

import pytest

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

