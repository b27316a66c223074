"""A refused synthetic ``--figure`` run or study leaves HOME as it was: both asked whether matplotlib imports
(``matplotlib_problem``) before their last checks, and importing matplotlib makes ``~/.config/matplotlib`` and
writes ``~/.cache/matplotlib/fontlist-*.json``. Under a fresh HOME, ``python -m torchtune_longshort.synthetic --quick
--figure 1a --out f`` (``f`` a file; or ``--replot --out nope``) and a study whose pre-flight refuses its lengths
(exit 2) left both there. Matplotlib is now asked after every other check, as Table 1 asks it."""

from __future__ import annotations

import pytest

import torchtune_longshort.study.__main__ as study_main
import torchtune_longshort.synthetic.__main__ as synthetic_main
from torchtune_longshort.study.config import StudyConfigError

@pytest.fixture
def fresh_home(tmp_path, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("MPLCONFIGDIR", "XDG_CONFIG_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    return home


def _asked(monkeypatch, module):
    asked = []
    monkeypatch.setattr(module, "matplotlib_problem", lambda: asked.append(1))
    return asked


@pytest.mark.parametrize("argv", [["--out", "f"], ["--replot", "--out", "nope"]])
def test_a_refused_synthetic_figure_run_never_imports_matplotlib(argv, tmp_path, fresh_home, monkeypatch, capsys):
    asked = _asked(monkeypatch, synthetic_main)
    (tmp_path / "f").write_text("a file\n")
    monkeypatch.chdir(tmp_path)
    assert synthetic_main.main(["--quick", "--figure", "1a", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--out" in err[0], err
    assert asked == [] and list(fresh_home.iterdir()) == []
    assert (tmp_path / "f").read_text() == "a file\n" and not (tmp_path / "nope").exists()


class _Study:  # a study of no runs to train (no `tune` to look for): the pre-flight is what is asked
    log = staticmethod(print)

    def runs(self):
        return []


def test_a_study_refused_by_its_preflight_never_imports_matplotlib(fresh_home, monkeypatch, capsys):
    asked = _asked(monkeypatch, study_main)
    checked = []

    def refused(study, log, **last_check):  # as a study whose lengths are past eval.max_length: its real message
        checked.append(study)
        raise StudyConfigError("study config: the evaluation could not measure every cell (pre-flight check, before "
                               "anything trains):\n  - eval.ppl_lengths=[512]: past eval.max_length=300")

    monkeypatch.setattr(study_main, "preflight", refused)
    assert study_main._train(_Study(), None) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "pre-flight" in err[0], err
    assert len(checked) == 1 and asked == [] and list(fresh_home.iterdir()) == []
