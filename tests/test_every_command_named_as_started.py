"""`python -m torchtune_longshort.eval`, `python -m torchtune_longshort.configs_cli` and `python -m
torchtune_longshort.training.recipe_config.validate` named themselves in their lines by their console scripts' names
("longshort-eval: error: ...", "longshort-eval: interrupted (SIGINT): ...", "[longshort-eval] 3 metrics scored"),
and `python -m torchtune_longshort.eval.report` printed "[longshort-eval-report] No figures: ..." whichever way it was
started; started_as.command_name took the script's name as an argument, a second copy of pyproject's
[project.scripts]. Every longshort-* command now names itself as started, the script's name read from the installed
distribution's entry points. References: the entry points (importlib.metadata) and the command line the test types
(sys.orig_argv, or a real `python -m` / console-script run)."""

from __future__ import annotations

import json
import subprocess
import sys
import types
from importlib import metadata
from importlib.machinery import ModuleSpec
from pathlib import Path

import pytest

from torchtune_longshort.started_as import command_name

OURS = sorted((ep.name, ep.module) for ep in metadata.entry_points(group="console_scripts")
              if ep.module.split(".")[0] == "torchtune_longshort")


def _as_python_m(monkeypatch, typed: str, spec: str) -> None:
    """This process as `python -B -m <typed>`: Python runs <spec> as __main__."""
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-B", "-m", typed], raising=False)
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=ModuleSpec(spec, None)))


def test_every_console_script_is_named_by_its_entry_point():
    assert len(OURS) >= 5, OURS  # pyproject's [project.scripts], as installed
    for name, module in OURS:  # a call from other code (this test): the console script's name
        assert command_name(module) == name, (name, module)


@pytest.mark.parametrize("typed, args", [("torchtune_longshort.eval", ["tasks-path", "x"]),
                                         ("torchtune_longshort.configs_cli", ["--list", "x"])])
def test_both_forms_refuse_under_their_own_name(typed, args):
    script = next(name for name, module in OURS if module in (typed, typed + ".__main__"))
    runs = [([sys.executable, "-m", typed], f"python -m {typed}: error: ")]
    if (Path(sys.executable).parent / script).is_file():  # the venv's console script, as pip installed it
        runs.append(([str(Path(sys.executable).parent / script)], f"{script}: error: "))
    for command, start in runs:
        done = subprocess.run(command + args, capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith(start), (command, done.stderr)
        assert done.stderr.count("\n") == 1, done.stderr


def test_validate_as_python_m_names_itself_in_its_refusal(monkeypatch, capsys):
    from torchtune_longshort.training.recipe_config import validate

    typed = "torchtune_longshort.training.recipe_config.validate"
    _as_python_m(monkeypatch, typed, typed)
    with pytest.raises(SystemExit) as e:
        validate.main(["--config", "run.yaml"])
    err = capsys.readouterr().err
    assert e.value.code == 2 and err.startswith(f"python -m {typed}: error: --config: "), err
    assert err.rstrip().endswith(f": python -m {typed} run.yaml"), err  # the command as it should be, as typed


def test_eval_as_python_m_names_itself_on_ctrl_c_and_in_its_closing_line(monkeypatch, capsys):
    from torchtune_longshort.eval import __main__ as eval_main
    from torchtune_longshort.eval.cli_messages import summary_line

    _as_python_m(monkeypatch, "torchtune_longshort.eval", "torchtune_longshort.eval.__main__")
    assert summary_line({"results": {}}).startswith("[python -m torchtune_longshort.eval] "), summary_line({})

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(eval_main, "_evaluate", interrupted)
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run"])
    with pytest.raises(SystemExit) as e:
        eval_main.main()
    err = capsys.readouterr().err
    assert e.value.code == 130 and err.startswith("python -m torchtune_longshort.eval: interrupted (SIGINT): "), err


def test_the_reports_no_figures_line_names_the_command_as_started(monkeypatch, capsys, tmp_path):
    from torchtune_longshort.eval.report import build

    _as_python_m(monkeypatch, "torchtune_longshort.eval.report", "torchtune_longshort.eval.report.__main__")
    monkeypatch.setattr(build, "matplotlib_problem", lambda: "matplotlib is not installed: pip install matplotlib")
    build._figures({}, {}, tmp_path, {})
    err = capsys.readouterr().err
    assert err.startswith("[python -m torchtune_longshort.eval.report] No figures: matplotlib"), err


def test_ctrl_c_while_a_python_m_command_imports_names_it_as_typed(monkeypatch, capsys):
    from torchtune_longshort.refusals import stopped_while_importing

    typed = "torchtune_longshort.training.recipe_config.validate"  # its module's own imports, past the package's
    _as_python_m(monkeypatch, typed, typed)
    with pytest.raises(SystemExit) as e:
        with stopped_while_importing("__main__", "validate.py"):
            raise KeyboardInterrupt
    err = capsys.readouterr().err
    assert e.value.code == 130 and err.startswith(f"python -m {typed}: interrupted (SIGINT): "), err


def test_peft_base_help_examples_name_the_command_as_started():
    """`python -m torchtune_longshort.eval peft-base --help` gave its examples as `longshort-eval peft-base ...` and
    `$(longshort-eval tasks-path)`, a script that may not be on the PATH of a `python -m` user. Reference: the command
    line this test types."""
    typed = "torchtune_longshort.eval"
    done = subprocess.run([sys.executable, "-m", typed, "peft-base", "--help"], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    examples = done.stdout.split("examples:")[1]
    assert f"  python -m {typed} peft-base run/step_3 --out run_step_3_base" in examples, examples
    assert f'"$(python -m {typed} tasks-path)"' in examples and "longshort-eval" not in examples, examples


def test_peft_refusals_name_peft_base_as_the_eval_command_was_started(monkeypatch, tmp_path):
    """`python -m torchtune_longshort.eval run --model hf --model_args pretrained=<step>,peft=<step>/adapter` on a run
    that changed the RoPE (YaRN x2) advised 'after longshort-eval peft-base <step> --out ...', a script a python -m
    user may not have on the PATH (peft-base's --help named it as started since 2fdd4c8, its refusals not); now
    'python -m torchtune_longshort.eval peft-base <step> ...'. Reference: the command line the test types, and the
    console script's name from the installed entry points for a call from other code."""
    from torchtune_longshort.eval.other_model_args import check_peft_args

    base, step = tmp_path / "base", tmp_path / "run" / "step_2"
    llama = {"model_type": "llama", "rope_theta": 10000.0, "max_position_embeddings": 512, "hidden_size": 64,
             "num_attention_heads": 4}
    (step / "adapter").mkdir(parents=True)
    base.mkdir()
    (base / "config.json").write_text(json.dumps(llama))
    (step / "config.json").write_text(json.dumps({**llama, "rope_scaling": {
        "rope_type": "yarn", "factor": 2.0, "original_max_position_embeddings": 256}}))
    (step / "adapter" / "adapter_config.json").write_text(json.dumps({"base_model_name_or_path": str(base)}))
    (step / "adapter" / "longshort_adapter.json").write_text("{}")
    script = next(name for name, module in OURS if module == "torchtune_longshort.eval.__main__")
    for typed in (None, "torchtune_longshort.eval"):
        if typed:
            _as_python_m(monkeypatch, typed, typed + ".__main__")
        for pretrained in (step, base):  # the step itself (adapters twice), the start (another RoPE)
            with pytest.raises(ValueError) as e:
                check_peft_args(str(pretrained), str(step / "adapter"))
            assert f"{f'python -m {typed}' if typed else script} peft-base {step} --out " in str(e.value), str(e.value)
