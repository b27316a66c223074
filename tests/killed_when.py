"""A real SIGKILL at a chosen moment: ``work`` runs in a forked child (its output silenced; no Python cleanup runs
in it once killed) until ``ready()`` holds in the test's process, polled every millisecond for up to ``timeout``
seconds; then the child is killed and reaped, and the test checks it died of that signal."""

from __future__ import annotations

import os
import signal
import time
from typing import Callable


def killed_when(work: Callable[[], object], ready: Callable[[], bool], timeout: float = 10) -> None:
    pid = os.fork()
    if pid == 0:  # the killed process
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            work()
        finally:
            os._exit(0)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if ready():
                break
        except (OSError, ValueError):  # a file not there yet, or half-written JSON
            pass
        time.sleep(0.001)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
