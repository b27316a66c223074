"""started_as.starting_command where no earlier test looked: the forms of ``-m`` Python's own option parser takes
(``-m mod``, ``-mmod``, ``-Bm mod``, ``-Bmmod``, ``-Rm mod``: -R was not read, and the command was named "python -m
torchtune_longshort"), read while a package above the module imports, and a console script of the project's while
its script imports the function it calls (none once the script has it, none for another distribution's script).
References: the command line a real interpreter is started with, and the installed entry points (importlib.metadata);
refusals.stopped_while_importing's quiet exit is 128 + SIGINT (signal's number)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from importlib import metadata
from pathlib import Path

import pytest

from torchtune_longshort.refusals import stopped_while_importing
from torchtune_longshort.started_as import starting_command

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("form", [["-m", "pkg.mod"], ["-mpkg.mod"], ["-Bm", "pkg.mod"], ["-Bmpkg.mod"],
                                  ["-Rm", "pkg.mod"], ["-tm", "pkg.mod"], ["-qBm", "pkg.mod"]])
def test_each_form_of_dash_m_is_read_as_typed_while_its_package_imports(tmp_path, form):
    flags = form[0].split("m")[0]
    if flags != "-" and subprocess.run([sys.executable, flags, "-c", ""], capture_output=True).returncode != 0:
        pytest.skip(f"this Python takes no {flags}")  # -t: accepted and ignored by Python 3.11
    (tmp_path / "pkg").mkdir()
    (tmp_path / "pkg" / "__init__.py").write_text(  # runs before pkg.mod: sys.argv[0] is still "-m"
        "from torchtune_longshort.started_as import starting_command\nprint(starting_command())\n")
    (tmp_path / "pkg" / "mod.py").write_text("")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, *form], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "python -m pkg.mod", (form, done.stdout)


def _script(name: str) -> str:
    return str(Path(sys.executable).parent / name)


def test_a_console_script_of_the_project_is_named_while_it_imports_and_not_after(monkeypatch):
    ours = sorted(ep.name for ep in metadata.entry_points(group="console_scripts")
                  if ep.module.split(".")[0] == "torchtune_longshort")
    assert ours, "the package is not installed: no console script to start as"
    ep = next(iter(metadata.entry_points(group="console_scripts", name=ours[0])))
    monkeypatch.setattr(sys, "argv", [_script(ours[0]), "--help"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace())  # `from <module> import <attr>` not done
    assert starting_command() == ours[0]
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(**{ep.attr.split(".")[0]: print}))
    assert starting_command() is None  # the script has its function: the command runs, no longer starts


def test_another_distributions_console_script_is_no_start_of_ours(monkeypatch):
    others = sorted(ep.name for ep in metadata.entry_points(group="console_scripts")
                    if ep.module.split(".")[0] != "torchtune_longshort")
    if not others:
        pytest.skip("no other distribution's console script installed")
    monkeypatch.setattr(sys, "argv", [_script(others[0])])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace())
    assert starting_command() is None


def test_a_module_run_as_a_script_naming_no_command_exits_quietly_as_sigint(monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=None))
    with pytest.raises(SystemExit) as e:
        with stopped_while_importing("__main__"):
            raise KeyboardInterrupt
    assert e.value.code == 128 + signal.SIGINT
    assert capsys.readouterr().err == ""


def test_python_m_of_a_package_names_its_own_modules_only(monkeypatch):
    from importlib.machinery import ModuleSpec

    from torchtune_longshort.started_as import command_name

    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-m", "torchtune_longshort.eval"], raising=False)
    monkeypatch.setitem(sys.modules, "__main__",
                        types.SimpleNamespace(__spec__=ModuleSpec("torchtune_longshort.eval.__main__", None)))
    assert command_name("torchtune_longshort.eval.cli_argv") == "python -m torchtune_longshort.eval"
    # a name that only begins as the package's is no module of it (no script names it: python -m that module)
    assert command_name("torchtune_longshort.evaluate") == "python -m torchtune_longshort.evaluate"


def test_an_interpreter_with_no_argv_or_no_main_module_starts_no_command(monkeypatch):
    ours = sorted(ep.name for ep in metadata.entry_points(group="console_scripts")
                  if ep.module.split(".")[0] == "torchtune_longshort")
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace())
    monkeypatch.setattr(sys, "argv", [])  # an embedding interpreter that set none
    assert starting_command() is None
    monkeypatch.setattr(sys, "argv", [_script(ours[0])])
    monkeypatch.delitem(sys.modules, "__main__")  # no script importing a function: no start
    assert starting_command() is None
