"""Whether the process a lock file names still runs: its PID is alive and, where the system says when it started
(Linux's ``/proc``), it is the same process (a PID is reused after its process ends); and the flock under which a
lock file is read, taken over and written."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator, Optional, Tuple


@contextlib.contextmanager
def folder_flock(folder: Path) -> Iterator[None]:
    """An exclusive flock of ``folder`` itself (no file made; a killed holder's goes with it) for the block: two
    starts that read one stale lock file cannot both delete it and write their own (the second deleted the first's
    fresh lock, and both held the folder). Where the file system has no flock (some network mounts), none."""
    try:
        fd = os.open(str(folder), os.O_RDONLY)
    except OSError:
        yield
        return
    try:
        with contextlib.suppress(OSError):
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # the flock goes with the descriptor


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def process_start(pid: int) -> Optional[str]:
    """When process ``pid`` started, as Linux gives it (field 22 of ``/proc/<pid>/stat``: clock ticks after boot),
    which a PID reused by another process does not share; None where there is no ``/proc`` (then a lock holds the
    PID alone) or the process is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 1:].split()  # field 2, the command name, may hold spaces and parentheses
    return fields[19] if len(fields) > 19 else None  # fields[0] is field 3 (the state)


def holder_alive(pid: int, started: Optional[str]) -> bool:
    """Whether the lock's holder still runs: its PID is alive and, when the lock recorded a start time and this
    system gives one, the process under that PID started then (else the PID was reused: the lock is stale)."""
    if not _pid_alive(pid):
        return False
    now = process_start(pid) if started is not None else None
    return now is None or now == started


def read_holder(lock: Path) -> Tuple[Optional[int], Optional[str]]:
    """The PID and start time a lock file records (None: not recorded, an earlier version's file; both None: no file
    or one that cannot be read)."""
    try:
        fields = lock.read_text().split()
        return (int(fields[0]) or None, fields[1] if len(fields) > 1 else None) if fields else (None, None)
    except (OSError, ValueError):
        return None, None


def written_as_lock(lock: Path) -> bool:
    """Whether ``lock`` is a lock file as a start writes it: a plain file (not a link), empty (a start killed between
    its create and its write) or ``<pid>[ <start>]``. Anything else under that name (a user's notes, a folder) is no
    lock to take over: deleting it as a stale one lost the user's file."""
    if lock.is_symlink() or not lock.is_file():
        return False
    try:
        fields = lock.read_text().split()
    except (OSError, UnicodeDecodeError):
        return False
    return len(fields) <= 2 and all(f.isdigit() for f in fields)


def _empty(lock: Path) -> bool:
    try:
        return lock.stat().st_size == 0
    except OSError:
        return False


def written_holder(lock: Path, wait_s: float = 2.0) -> Tuple[Optional[int], Optional[str]]:
    """:func:`read_holder`, waiting up to ``wait_s`` for an empty lock file to be written: another run's O_EXCL create
    comes a moment before its write, and an empty file read as stale let two runs take the lock together. One still
    empty after that is a run killed between the two: stale."""
    deadline = time.monotonic() + wait_s
    while True:
        holder = read_holder(lock)
        if holder[0] is not None or time.monotonic() >= deadline or not _empty(lock):
            return holder
        time.sleep(0.02)
