"""A study stage run as ``python -m <module>`` (lm-eval, the BABILong generator) that a signal stopped is named by
its module in the study's line ('clex_a0_s0: interrupted at eval: python -m torchtune_longshort.eval stopped by
SIGTERM (exit 143)'); it was named 'python' alone, which said neither. The command line itself is the reference."""

from __future__ import annotations

import sys

import pytest

from torchtune_longshort.study.stages import StudyInterrupted, run_command


def test_a_python_m_stage_stopped_by_a_signal_is_named_by_its_module(tmp_path):
    (tmp_path / "my_stage.py").write_text("raise SystemExit(143)\n")  # as lm-eval exits after a SIGTERM
    argv = [sys.executable, "-m", "my_stage", "--out", "x"]
    with pytest.raises(StudyInterrupted) as e:
        run_command(argv, tmp_path / "stage.log", tmp_path, {"PATH": "/usr/bin:/bin"}, 60)
    assert str(e.value) == f"{argv[0].rsplit('/', 1)[-1]} -m {argv[2]} stopped by SIGTERM (exit 143)"
    assert (tmp_path / "stage.log").read_text().startswith("$ " + " ".join(argv))
