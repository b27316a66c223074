"""The suite runs with Python's own Ctrl-C handler even when it was started with SIGINT ignored (a background job of
a non-interactive shell: ``nohup python -m pytest ... &``), as the tests of Ctrl-C need: an ignored SIGINT is
inherited by every command a test starts (conftest). The reference: the kernel's own record of the ignored signals
(``SigIgn`` in ``/proc/<pid>/status``) and ``signal.default_int_handler``."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _sigint_ignored_by_kernel() -> bool:
    with open("/proc/self/status") as f:
        mask = next(int(line.split()[1], 16) for line in f if line.startswith("SigIgn:"))
    return bool(mask & (1 << (signal.SIGINT - 1)))


def test_this_process_has_pythons_ctrl_c_handler():
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    if os.path.exists("/proc/self/status"):
        assert not _sigint_ignored_by_kernel()


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads /proc")
def test_a_suite_started_with_ctrl_c_ignored_takes_pythons_handler_back():
    def ignore_sigint():
        signal.signal(signal.SIGINT, signal.SIG_IGN)

    env = dict(os.environ, LONGSHORT_TEST_FRESH="1")
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("PYTEST_ADDOPTS", None)
    test = f"{Path(__file__).name}::test_this_process_has_pythons_ctrl_c_handler"
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", test],
                       cwd=REPO / "tests", env=env, preexec_fn=ignore_sigint, capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
