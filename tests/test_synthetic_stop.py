"""The synthetic figures' worker processes (``--workers N``) stopped by a signal, or one of them killed: the command
ends within seconds, in one line, with no process of it left (reference: what the CLI's INTERRUPTED line and the
README say a stop does). The runs are :mod:`stand_in_runs` (Fig. 5 at one seed is two runs, on two workers: one
returns at once, the other waits), so that a worker is idle when the signal comes, as at the end of a figure."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
CHILD = """import sys
sys.path.insert(0, {tests!r})
import stand_in_runs
from torchtune_longshort.synthetic import __main__ as cli, experiments
experiments._worker = stand_in_runs.run
sys.exit(cli.main(sys.argv[1:]))
"""


def _start(tmp_path, **env) -> subprocess.Popen:
    args = ["--figure", "5", "--quick", "--seeds", "1", "--workers", "2", "--cache", str(tmp_path / "cache"),
            "--out", str(tmp_path / "out")]
    return subprocess.Popen([sys.executable, "-c", CHILD.format(tests=str(REPO / "tests")), *args], cwd=tmp_path,
                            env={**os.environ, "PYTHONPATH": str(REPO), "LONGSHORT_TEST_FRESH": "1", **env}, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def _ended(p: subprocess.Popen, within: float) -> tuple:
    """(exit status, output lines, live processes left in its group); the group is killed if it outlived ``within``."""
    try:
        out, _ = p.communicate(timeout=within)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out, _ = p.communicate()
        return "still running after %gs" % within, out.replace("\r", "\n").splitlines(), []
    deadline, left = time.time() + 5, ["?"]
    while left and time.time() < deadline:  # the multiprocessing resource tracker leaves once its pipe closes
        ps = subprocess.run(["ps", "-o", "pid=,stat=", "-g", str(p.pid)], capture_output=True, text=True).stdout
        left = [line for line in ps.splitlines() if "Z" not in line.split()[1]]
        time.sleep(0.1)
    if left:
        os.killpg(p.pid, signal.SIGKILL)
    return p.returncode, out.replace("\r", "\n").splitlines(), left


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_stop_to_the_process_group_ends_every_worker(tmp_path, sig):
    """SIGTERM to the group (a scheduler's) killed the idle worker while it held the Pool's task-queue lock, and
    Pool.terminate waited for that lock for ever (4 of 4 tries, a hang); Ctrl-C printed each worker's
    KeyboardInterrupt traceback above the one line."""
    p = _start(tmp_path)
    deadline = time.time() + 60
    while not list((tmp_path / "cache").glob("*.json")):  # the identity run is in: its worker is idle
        assert p.poll() is None and time.time() < deadline, p.communicate()[0][-3000:]
        time.sleep(0.05)
    time.sleep(0.5)
    os.killpg(p.pid, sig)
    code, lines, left = _ended(p, within=20)
    assert code == 128 + sig, (code, lines[-20:])
    assert lines[-1].startswith(f"python -m torchtune_longshort.synthetic: interrupted ({sig.name}): "), lines[-5:]
    assert not any("Traceback" in line for line in lines), lines[-30:]
    assert not left, left


def test_a_worker_killed_alone_ends_the_command_in_one_line(tmp_path):
    """A worker killed from outside (the out-of-memory killer's SIGKILL): the Pool lost its run and waited for its
    result for ever; now one line naming the worker and its signal, exit 2."""
    code, lines, left = _ended(_start(tmp_path, STAND_IN_RUN_DIES="1"), within=30)
    assert code == 2, (code, lines[-20:])
    assert " was killed by SIGKILL before it returned its result" in lines[-1], lines[-5:]
    assert not any("Traceback" in line for line in lines), lines[-30:]
    assert not left, left
