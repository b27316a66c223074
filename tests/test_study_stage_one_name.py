"""A study stage was named two ways: killed, by the word the study's code gave it ('recipe killed by SIGKILL (exit
137; ...)', 'lm-eval killed by SIGKILL', 'generator killed by ...'), stopped by Ctrl-C, by its command line ('tune
stopped by SIGINT (exit 130)', 'python -m torchtune_longshort.eval stopped by SIGINT (exit 130)'). Each stage now
has one name (stages.PROGRAMS), whether it failed, was killed or was stopped. Stand-in stages: real children, one
killing itself with SIGKILL, one exiting 130 as the recipe does after it saved on SIGINT."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from study_helpers import CPU_SMALL, ROOT, FakeExecutor

from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.stages import StudyInterrupted, run_command

KILLED = "import os, signal; print('loading', flush=True); os.kill(os.getpid(), signal.SIGKILL)"
STOPPED = "print('saved step_1', flush=True); raise SystemExit(130)"  # the recipe's exit after a SIGINT
ENV = {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}
KEY = "clex_a0_s0"


def _stage_of(argv) -> str:
    if Path(argv[0]).name == "tune":
        return "train"
    return "babilong_data" if argv[2].endswith(".generator") else "eval"


class _OneStage(FakeExecutor):
    """``stage`` run as a real child running ``code``; the other stages played."""

    def __init__(self, stage: str, code: str):
        super().__init__()
        self.stage, self.code = stage, code

    def __call__(self, argv, log_path, cwd, env, timeout):
        if _stage_of(argv) == self.stage:
            return run_command([sys.executable, "-c", self.code], log_path, cwd, ENV, timeout)
        return super().__call__(argv, log_path, cwd, env, timeout)


def _error(tmp_path, stage: str, code: str) -> str:
    cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    study = Study(cfg, output_dir=tmp_path / "q", repo_root=ROOT, executor=_OneStage(stage, code), log=lambda m: None)
    run = next(r for r in study.runs() if r.key == KEY)
    try:
        rec = study.run_one(KEY, run)
        assert (rec["status"], rec["stage"]) == ("failed", stage), rec
    except StudyInterrupted:  # recorded, and the grid stops
        rec = json.loads((study.run_dir(KEY) / "result.json").read_text())
        assert rec["status"] == "interrupted", rec
    return rec["error"]


@pytest.mark.parametrize("stage", ["train", "eval", "babilong_data"])
def test_a_stage_is_named_alike_killed_and_stopped(tmp_path, stage):
    killed = _error(tmp_path / "k", stage, KILLED)
    stopped = _error(tmp_path / "s", stage, STOPPED)
    name = killed.split(" killed by SIGKILL ")[0]
    assert " " not in name and name in ("recipe", "lm-eval", "generator"), killed
    assert stopped == f"{name} stopped by SIGINT (exit 130)", (killed, stopped)
