"""Ctrl-C in the first seconds of a command (`python -m torchtune_longshort.synthetic ...`, the BABILong generator,
the study, Table 1, the eval report, the misalignment metric, the config check, and their console scripts), while
torch is imported: a KeyboardInterrupt traceback and exit -2, against the README's "Ctrl-C ... ends every command in
one line ... exit 130". The SIGINT here is real, sent by a stand-in torch to its own process while it is imported;
the reference is the child's exit status (128 + signal.SIGINT) and its stderr."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
# a torch whose import receives Ctrl-C: the signal arrives while the import runs, as a user's Ctrl-C does
TORCH = "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n"


@pytest.mark.parametrize("module,args", [
    ("torchtune_longshort.synthetic", ["--figure", "all", "--quick"]),
    ("torchtune_longshort.eval.tasks.babilong.generator", ["--lengths", "0k"]),
    # the packages above these import torch (study, eval.report, metrics, training): a traceback on the parent
    ("torchtune_longshort.study", ["--config", "study/cpu_small.yaml", "--quick"]),
    ("torchtune_longshort.study.table1", ["--config", "study/table1_smollm2.yaml", "--quick"]),
    ("torchtune_longshort.eval.report", ["--runs", "x"]),
    ("torchtune_longshort.metrics.cli", ["--checkpoint-dir", "x"]),
    ("torchtune_longshort.training.recipe_config.validate", ["x.yaml"]),
], ids=["synthetic", "babilong_generator", "study", "table1", "eval_report", "misalignment", "validate"])
def test_ctrl_c_while_a_command_imports_torch_ends_in_one_line_exit_130(module, args, tmp_path):
    (tmp_path / "torch.py").write_text(TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), LONGSHORT_TEST_FRESH="1")
    p = subprocess.run([sys.executable, "-m", module, *args, "--out", str(tmp_path / "out")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + signal.SIGINT, (p.returncode, p.stderr[-2000:])
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"python -m {module}: interrupted (SIGINT): "), p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize("script", ["longshort-eval-report", "longshort-misalignment", "longshort-validate"])
def test_ctrl_c_while_a_console_script_imports_torch_ends_in_one_line_exit_130(script, tmp_path):
    """pip's script (``from <module> import main``) has its own path as ``sys.argv[0]``, not ``-m``."""
    path = Path(sys.executable).parent / script
    if not path.is_file():
        pytest.skip(f"{script} is not installed beside {sys.executable}")
    (tmp_path / "torch.py").write_text(TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    p = subprocess.run([sys.executable, str(path), "--help"], cwd=tmp_path, env=env, capture_output=True, text=True,
                       timeout=60)
    assert p.returncode == 128 + signal.SIGINT, (p.returncode, p.stderr[-2000:])
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"{script}: interrupted (SIGINT): "), p.stderr


@pytest.mark.parametrize("package", ["torchtune_longshort.synthetic", "torchtune_longshort.metrics",
                                     "torchtune_longshort.eval.report"])
def test_an_import_of_the_package_by_other_code_keeps_the_interrupt(package, tmp_path):
    (tmp_path / "torch.py").write_text(TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    p = subprocess.run([sys.executable, "-c", f"import {package}"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGINT and "KeyboardInterrupt" in p.stderr, (p.returncode, p.stderr[-2000:])
