"""Ctrl-C to a study while a fine-tune's ``tune`` still imported torch: tune ends in a KeyboardInterrupt traceback,
exit 1 (not the recipe's 130 after it saved), and the study recorded 'train: recipe exited with 1: KeyboardInterrupt'
and said '[study] clex_a0_s0: interrupted at train: train: recipe exited with 1: KeyboardInterrupt' ('train:' twice,
and 'exited with 1' for a stop). A stage that exits non-zero after the study's stop reached it is now told as stopped
by that signal, as a stage that saved is ('python stopped by SIGINT (exit 1)'), and a stage error recorded as
interrupted names its stage once. The reference: the child's own exit status (Popen); the record's stage:
test_study_stops."""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

import pytest

from torchtune_longshort.study.stages import StudyInterrupted, run_command
from torchtune_longshort.study.stop import StudySignal, stop_handlers

# a process stopped while it imports: Python's KeyboardInterrupt traceback, and exit 1 as tune's does
IMPORTING = ("import sys, time, traceback\nprint('rea' + 'dy', flush=True)\ntry:\n    time.sleep(30)\n"
             "except KeyboardInterrupt:\n    traceback.print_exc()\n    sys.exit(1)\n")


def test_a_stage_ending_1_after_the_studys_stop_is_told_stopped_by_it(tmp_path):
    log, got = tmp_path / "train.log", {}

    def stage():  # waited for in a worker thread, as the study's grid waits for a run's stage
        try:
            got["rc"] = run_command([sys.executable, "-c", IMPORTING], log, tmp_path, {}, 30)
        except StudyInterrupted as e:
            got["stop"] = e

    with stop_handlers():
        worker = threading.Thread(target=stage)
        worker.start()
        deadline = time.time() + 20
        while "\nready\n" not in (log.read_text() if log.is_file() else "") and time.time() < deadline:
            time.sleep(0.05)
        with pytest.raises(StudySignal):
            os.kill(os.getpid(), signal.SIGINT)  # the study's handler forwards it to the stage
            time.sleep(5)
        worker.join(20)
    assert "KeyboardInterrupt" in log.read_text()  # the child did end as tune does, exit 1
    assert "rc" not in got, got
    assert str(got["stop"]) == f"{os.path.basename(sys.executable)} stopped by SIGINT (exit 1)"
    assert got["stop"].signum == signal.SIGINT

