"""A synthetic reproduction with --workers N killed -9: its pool's workers do not train on without it
(worker_pool's workers leave within a second of their parent's death)."""

import os
import signal
import time
from contextlib import closing
from pathlib import Path

from torchtune_longshort.worker_pool import unordered


def _gone(pid: int) -> bool:
    """No such process, or one that ended and waits for its reaper (a container's PID 1 may never reap it)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _workers(pid: int):
    """The spawned workers among ``pid``'s children (not the resource tracker spawn also starts)."""
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid and b"spawn_main" in (stat.parent / "cmdline").read_bytes():
            out.append(int(stat.parent.name))
    return out


def test_a_pool_worker_ends_when_the_command_that_started_it_is_killed():
    # `python -m torchtune_longshort.synthetic --figure 1a --workers 2` killed -9 left multiprocessing.Pool's workers
    # training at full CPU beside the rerun (still there 75 s later), for results only the killed command would store.
    command = os.fork()
    if command == 0:  # the command: its workers each in a long run
        try:
            with closing(unordered(time.sleep, [60, 60], 2)) as results:
                for _ in results:
                    pass
        finally:
            os._exit(0)
    deadline, workers = time.time() + 30, []
    try:
        while len(workers) < 2 and time.time() < deadline:
            workers = _workers(command)
            time.sleep(0.05)
        assert len(workers) == 2, "the command did not start its workers"
        time.sleep(0.5)  # the workers are in their long runs
    finally:
        os.kill(command, signal.SIGKILL)
        os.waitpid(command, 0)
    try:
        deadline = time.time() + 5
        while not all(_gone(w) for w in workers) and time.time() < deadline:
            time.sleep(0.05)
        assert all(_gone(w) for w in workers), "a worker went on after the command was killed"
    finally:
        for w in workers:
            if not _gone(w):
                os.kill(w, signal.SIGKILL)


def test_an_exception_a_run_raises_ends_the_call_as_pool_imap_unordered_does():
    """A run that raises (a bad figure's training): the exception reaches the caller, as
    multiprocessing.Pool.imap_unordered raises it (the reference: its ValueError for int('x')), not a run left out
    without a word."""
    import multiprocessing

    import pytest

    items = ["1", "x", "3"]
    with multiprocessing.get_context("spawn").Pool(1) as pool, pytest.raises(ValueError) as reference:
        list(pool.imap_unordered(int, items))
    with closing(unordered(int, items, workers=1)) as results, pytest.raises(ValueError) as raised:
        list(results)
    assert str(raised.value) == str(reference.value)
    with closing(unordered(int, ["1", "3"], workers=2)) as results:
        assert sorted(results) == [1, 3]
