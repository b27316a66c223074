"""A command killed by SIGKILL part-way while it writes (no Python left to clean up): run in a child process, which
kills itself right after its first figure is saved."""

from __future__ import annotations

import signal
import subprocess
import sys

SCRIPT = """
import os, signal, sys
import {module} as target
save = target.save_figure
def save_and_die(fig, path, **kwargs):
    save(fig, path, **kwargs)
    os.kill(os.getpid(), signal.SIGKILL)
target.save_figure = save_and_die
{call}
"""


def killed_after_first_figure(module: str, call: str, *argv) -> None:
    """Run ``call`` (Python, ``sys.argv[1:]`` = ``argv``) in a child whose ``module.save_figure`` kills the child
    after its first figure; asserts that it died of SIGKILL."""
    p = subprocess.run([sys.executable, "-c", SCRIPT.format(module=module, call=call), *map(str, argv)])
    assert p.returncode == -signal.SIGKILL, p.returncode
