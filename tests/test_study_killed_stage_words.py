"""A stage killed by SIGKILL (the out-of-memory killer, or ``kill -9`` on tune's PID while a run trained) was told
'FAILED at train: recipe exited with -9: ...' ('lm-eval exited with -9', 'generator exited with -9' alike): Popen's
-signal, which no shell prints and which says nothing of why. It now reads as the shell gives the status, with what
it likely means: 'recipe killed by SIGKILL (exit 137; out of memory? see dmesg): ...'. The reference: sh's $? of the
same child killed by the same signal."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from study_helpers import CPU_SMALL, ROOT, FakeExecutor

from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.stages import StageError, run_command, run_eval

KILLED = "import os, signal; print('loading', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}  # a minimal env: the child starts at once
KEY = "clex_a0_s0"


def _shell_status() -> int:
    out = subprocess.run(["sh", "-c", f'"{sys.executable}" -c "{KILLED}"; echo $?'], capture_output=True, text=True,
                         env=ENV)
    return int(out.stdout.split()[-1])


def _words(what: str) -> str:
    return f"{what} killed by SIGKILL (exit {_shell_status()}; out of memory? see dmesg): loading"


def test_an_evaluation_killed_by_sigkill_is_told_as_the_shell_does(tmp_path):
    with pytest.raises(StageError) as e:
        run_eval(run_command, [sys.executable, "-c", KILLED], tmp_path / "eval.log", tmp_path, ENV, 30, tmp_path, [])
    assert (e.value.stage, e.value.message) == ("eval", _words("lm-eval"))


class _KilledTraining(FakeExecutor):
    """The fine-tune ``KEY``'s tune killed by SIGKILL while it trains: a real child killing itself."""

    def __call__(self, argv, log_path, cwd, env, timeout):
        if Path(argv[0]).name == "tune":
            return run_command([sys.executable, "-c", KILLED], log_path, cwd, ENV, timeout)
        return super().__call__(argv, log_path, cwd, env, timeout)


def test_a_fine_tune_killed_by_sigkill_is_told_as_the_shell_does(tmp_path):
    said = []
    cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "out", repo_root=ROOT, executor=_KilledTraining(), log=said.append)
    rec = study.run_one(KEY, next(r for r in study.runs() if r.key == KEY), evaluate=False)
    assert (rec["status"], rec["stage"]) == ("failed", "train")
    assert rec["error"].endswith(_words("recipe")), rec["error"]
    assert "-9" not in "\n".join(said), said
