""":func:`~torchtune_longshort.refusals.stopped_while_importing` where no earlier test looked: the recipe run by path
(``tune run FILE``: ``__name__ == "__main__"``), the package's file or the checkout's ``recipes/`` entry, stopped while
it imports torch ends in one line naming it with 128 + SIGINT (before, it exited 130 without a word: a Ctrl-C'd
``tune run`` said nothing at all); and a stop signal other than SIGINT raised into the block (a :class:`Stopped`) is
told and exited by its own number. The references: ``signal``'s numbers and names."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import types
from pathlib import Path

import pytest

from torchtune_longshort.refusals import Stopped, stopped_while_importing

REPO = Path(__file__).resolve().parents[1]
TORCH = "import os, signal, time\nos.kill(os.getpid(), signal.SIGINT)\ntime.sleep(30)\n"


@pytest.mark.parametrize("entry", ["torchtune_longshort/recipes/longshort_finetune.py", "recipes/longshort_finetune.py"])
def test_the_recipe_run_by_path_stopped_while_importing_torch_says_so_in_one_line(tmp_path, entry):
    (tmp_path / "torch.py").write_text(TORCH)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(tmp_path), str(REPO)]))
    p = subprocess.run([sys.executable, str(REPO / entry), "--config", "x.yaml"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 128 + signal.SIGINT, (p.returncode, p.stderr[-2000:])
    assert p.stderr.startswith(f"longshort_finetune: interrupted ({signal.Signals(signal.SIGINT).name}): stopped "
                               "while it started") and p.stderr.count("\n") == 1, p.stderr[-2000:]
    assert sorted(os.listdir(tmp_path)) == ["torch.py"]  # nothing written


def test_a_sigterm_raised_while_importing_is_told_and_exited_as_sigterm(capsys, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["prog.py"])
    monkeypatch.setitem(sys.modules, "__main__", types.SimpleNamespace(__spec__=None))  # `python prog.py`: no -m
    with pytest.raises(SystemExit) as e:
        with stopped_while_importing("__main__", "prog"):
            raise Stopped(signal.SIGTERM)
    assert e.value.code == 128 + signal.SIGTERM
    err = capsys.readouterr().err
    assert err.startswith(f"prog: interrupted ({signal.Signals(signal.SIGTERM).name}): ") and err.count("\n") == 1
