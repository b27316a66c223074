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


@pytest.mark.parametrize("flags", ["-Rm", "-tm", "-bBdiOPqRsStuvxm"])  # -E, -I: no PYTHONPATH to find the probe
def test_a_module_started_after_any_flag_without_argument_is_named_as_typed(flags, tmp_path):
    # `python -Rm <module>` (-R: hash randomization, a no-op kept since 3.3) was named "python -m torchtune_longshort":
    # -R was missing from the flags read before -m. The reference: a real `python <flags> <module>`, whose
    # sys.orig_argv is what Python parsed, and the module Python itself ran as __main__ (its __spec__).
    import os
    import subprocess
    from pathlib import Path

    (tmp_path / "probe.py").write_text("import sys\nfrom torchtune_longshort.started_as import running_module\n"
                                       "print(running_module(), __spec__.name, sys.orig_argv[1:])\n")
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{Path(__file__).resolve().parents[1]}"}
    env.pop("PYTHONSAFEPATH", None)
    done = subprocess.run([sys.executable, "-X", "utf8", flags, "probe"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, stdin=subprocess.DEVNULL, timeout=30)
    assert done.returncode == 0, done.stderr
    out = done.stdout.strip().splitlines()[0]
    assert out == f"python -m probe probe {['-X', 'utf8', flags, 'probe']}", out
