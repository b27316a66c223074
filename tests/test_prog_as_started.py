"""`python -m torchtune_longshort.metrics.cli` and `python -m torchtune_longshort.eval.report` named themselves in
their error lines by their console scripts' names ("longshort-misalignment: error: ..."), while Ctrl-C during their
imports named the command as typed. Their lines now follow how the command was started, as argparse's own prog
follows sys.argv[0]. References: the command line the test types (sys.orig_argv) and the console script's name from
the installed entry points (importlib.metadata), not the modules' own constants."""

from __future__ import annotations

import sys
import types
from importlib import metadata
from importlib.machinery import ModuleSpec

import pytest

from torchtune_longshort.eval.report import build as report_build
from torchtune_longshort.metrics import cli as metrics_cli

COMMANDS = [("torchtune_longshort.metrics.cli", "torchtune_longshort.metrics.cli", metrics_cli),
            ("torchtune_longshort.eval.report", "torchtune_longshort.eval.report.__main__", report_build)]


def _error_line(main, capsys) -> str:
    with pytest.raises(SystemExit) as e:
        main([])  # no arguments: argparse's own refusal, naming the command
    assert e.value.code == 2
    lines = capsys.readouterr().err.strip().splitlines()
    return lines[-1]


@pytest.mark.parametrize("typed, spec, module", COMMANDS)
def test_the_error_line_names_the_command_as_started(typed, spec, module, monkeypatch, capsys):
    main = module.main
    script = next(ep.name for ep in metadata.entry_points(group="console_scripts")
                  if ep.value == f"{module.__name__}:main")
    # a console script, or a call from other code (a test): its script's name, as before
    assert _error_line(main, capsys).startswith(f"{script}: error: ")
    # `python -B -m <typed>`: Python runs <spec> as __main__
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-B", "-m", typed], raising=False)
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=ModuleSpec(spec, None)))
    assert _error_line(main, capsys).startswith(f"python -m {typed}: error: ")
