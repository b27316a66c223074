"""Ctrl-C in the first seconds of `python -m torchtune_longshort.synthetic ...` or of the BABILong generator, while
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
], ids=["synthetic", "babilong_generator"])
def test_ctrl_c_while_a_command_imports_torch_ends_in_one_line_exit_130(module, args, tmp_path):
    (tmp_path / "torch.py").write_text(TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]), LONGSHORT_TEST_FRESH="1")
    p = subprocess.run([sys.executable, "-m", module, *args, "--out", str(tmp_path / "out")], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + signal.SIGINT, (p.returncode, p.stderr[-2000:])
    assert p.stderr.count("\n") == 1 and p.stderr.startswith(f"python -m {module}: interrupted (SIGINT): "), p.stderr
    assert "Traceback" not in p.stderr and not (tmp_path / "out").exists()


def test_an_import_of_the_package_by_other_code_keeps_the_interrupt(tmp_path):
    (tmp_path / "torch.py").write_text(TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    p = subprocess.run([sys.executable, "-c", "import torchtune_longshort.synthetic"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == -signal.SIGINT and "KeyboardInterrupt" in p.stderr, (p.returncode, p.stderr[-2000:])
