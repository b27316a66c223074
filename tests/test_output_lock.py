"""The output-folder lock (``training.output_dir.OutputDirLock``, the recipe's ``output_dir`` and the study's
``--out``): who holds it, read from its file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="start times come from Linux's /proc")
def test_a_lock_whose_pid_was_reused_is_stale(tmp_path):
    """A lock records its holder's PID and start time (field 22 of /proc/<pid>/stat). Before, a dead run's PID taken
    by an unrelated process kept the lock held forever; now a live PID that started at another time is stale. The
    right start time is live, and so is a lock file of the earlier format (the PID alone)."""
    from torchtune_longshort.training.output_dir import OutputDirInUse, OutputDirLock

    other = subprocess.Popen(["sleep", "60"])
    try:
        fields = Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()
        started = fields[19]
        for content in (f"{other.pid} {started}\n", f"{other.pid}\n"):  # the holder itself; an old lock file
            (tmp_path / ".lock").write_text(content)
            with pytest.raises(OutputDirInUse, match=f"PID {other.pid}"):
                OutputDirLock(tmp_path).acquire()
        (tmp_path / ".lock").write_text(f"{other.pid} {int(started) + 1}\n")  # its PID, another process's start
        lock = OutputDirLock(tmp_path).acquire()
        mine = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()} {mine}\n"
        lock.release()
        assert not (tmp_path / ".lock").exists()
    finally:
        other.kill()
        other.wait()


def test_a_lock_file_created_but_not_yet_written_is_held(tmp_path):
    """Another run creates the lock file (O_EXCL) a moment before it writes its PID. An empty lock file was read as
    stale: a second run starting in that moment took the lock as well. Now an empty file is read again until it is
    written (held) or ~2 s have passed (a run killed between the two: stale, taken over)."""
    import threading

    from torchtune_longshort.training.output_dir import OutputDirInUse, OutputDirLock

    lock_file = tmp_path / ".lock"
    lock_file.touch()  # the first run's O_EXCL create; it writes its PID 0.3 s later
    writer = threading.Timer(0.3, lambda: lock_file.write_text(f"{os.getpid()}\n"))
    writer.start()
    try:
        with pytest.raises(OutputDirInUse, match=f"PID {os.getpid()}"):
            OutputDirLock(tmp_path).acquire()
    finally:
        writer.join()
    lock_file.write_text("")  # never written: its run died between create and write
    lock = OutputDirLock(tmp_path).acquire()
    assert lock_file.read_text().split()[0] == str(os.getpid())
    lock.release()
