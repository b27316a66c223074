"""A study killed -9 (the out-of-memory killer, `kill -9`, a scheduler that kills the study's process alone): its
running stage does not go on without it."""

import os
import signal
import sys
import time
from pathlib import Path

from torchtune_longshort.study.stages import run_command


def _gone(pid: int) -> bool:
    """No such process, or one that ended and waits for its reaper (a container's PID 1 may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def test_a_stage_ends_when_the_study_that_started_it_is_killed(tmp_path):
    # Before: the fine-tune went on training, unseen, holding its run's lock; the study's rerun failed that run
    # ("output_dir=... is in use by another run (PID ...)") and reported it failed, while the orphan finished later.
    # Now the stage gets SIGTERM (the recipe saves its step and exits) as soon as the study is gone.
    log = tmp_path / "stage.log"
    stage = [sys.executable, "-c", "import os, time; print('pid', os.getpid(), flush=True); time.sleep(60)"]
    study = os.fork()
    if study == 0:  # the study: runs the stage as the grid does, until it is killed
        try:
            run_command(stage, log, tmp_path, {}, None)  # no test warm-start hooks
        finally:
            os._exit(0)
    deadline, pid = time.time() + 30, None
    while pid is None and time.time() < deadline:
        words = log.read_text().split() if log.exists() else []
        pid = int(words[words.index("pid") + 1]) if "pid" in words[:-1] else None
        time.sleep(0.05)
    assert pid is not None, log.read_text()
    os.kill(study, signal.SIGKILL)
    os.waitpid(study, 0)
    try:
        deadline = time.time() + 5
        while not _gone(pid) and time.time() < deadline:
            time.sleep(0.05)
        assert _gone(pid), "the stage went on after the study was killed"
    finally:
        if not _gone(pid):
            os.kill(pid, signal.SIGKILL)
