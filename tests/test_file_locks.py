"""file_locks.flock_named's own contract, in one process (flock conflicts between two opens of one file, threads or
not): hand mutants that survived the writers' tests (test_concurrent_writes, test_gguf_lock) returned the file a
holder renamed away while this call waited (two processes then each hold 'the' lock of one name), called ``waiting``
each time it blocked instead of once, made a missing folder without ``make_folder``, called a file it opened as
there its own creation, and gave up on a file removed between its two opens. The references: os.stat of
the path (which file it names now) and the folder's existence."""

import fcntl
import os
import threading

import pytest

from bounded_child import run_bounded
from torchtune_longshort.file_locks import flock_named


def _holder(path):
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def test_a_file_renamed_away_while_waiting_is_not_the_lock_taken(tmp_path):
    path = tmp_path / "x.lock"
    first = _holder(path)
    calls = []

    def waiting():  # the holder renames its file away, then lets it go: the name now names no file
        calls.append(1)
        os.rename(path, tmp_path / "moved")
        os.close(first)

    fd, made = flock_named(path, os.O_RDWR, waiting)
    try:
        named, held = os.stat(path), os.fstat(fd)
        assert (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev)
        assert made and calls == [1]
    finally:
        os.close(fd)


def test_waiting_is_said_once_however_often_the_call_blocks(tmp_path):
    path = tmp_path / "x.lock"
    first = _holder(path)
    second = []
    calls = []

    def waiting():  # a second holder takes a new file of the name; the call blocks again, on it, until it goes
        calls.append(1)
        os.rename(path, tmp_path / "moved")
        second.append(_holder(path))
        os.close(first)
        threading.Timer(0.3, os.close, (second[0],)).start()

    fd, made = flock_named(path, os.O_RDWR, waiting)
    try:
        named, held = os.stat(path), os.fstat(fd)
        assert (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev)  # not the file renamed away
        assert calls == [1] and not made  # the second holder's file, opened as there
    finally:
        os.close(fd)


def test_a_file_removed_between_its_two_opens_is_created_anew(tmp_path, monkeypatch):
    """Another holder had the file when this call tried to create it, and removed it before this call opened it."""
    path = tmp_path / "x.lock"
    real_open, tries = os.open, []

    def racing_open(p, flags, *mode):
        tries.append(bool(flags & os.O_EXCL))
        if len(tries) == 1:
            raise FileExistsError(p)  # the other holder's file, gone by the next call (never made here)
        return real_open(p, flags, *mode)

    monkeypatch.setattr(os, "open", racing_open)
    fd, made = flock_named(path, os.O_RDWR)
    monkeypatch.undo()
    os.close(fd)
    assert made and path.is_file() and tries == [True, False, True]


def test_a_missing_folder_is_made_only_when_asked(tmp_path):
    path = tmp_path / "gone" / "x.lock"
    with pytest.raises(FileNotFoundError):
        flock_named(path, os.O_RDWR)
    assert not path.parent.exists()
    fd, made = flock_named(path, os.O_RDWR, make_folder=True)
    os.close(fd)
    assert made and path.is_file()
    fd, made = flock_named(path, os.O_RDWR)
    os.close(fd)
    assert not made


def test_a_link_to_nothing_at_the_locks_name_is_refused_not_tried_forever(tmp_path):
    # the model cache's lock (.<model>.lock) a link to nothing: each try found it there (O_EXCL) and not there (the
    # open through it), and went round again, the conversion never starting nor ending; run apart, with a limit

    lock = tmp_path / ".model.lock"
    os.symlink(tmp_path / "gone", lock)
    code = ("import os, sys\nfrom pathlib import Path\nfrom torchtune_longshort.file_locks import flock_named\n"
            "try:\n    flock_named(Path(sys.argv[1]), os.O_RDWR, make_folder=True)\n"
            "except FileExistsError as e:\n    print(e.strerror)\n")
    p = run_bounded(code, lock, spun="flock_named went round a link to nothing")
    assert p.returncode == 0 and "is a symbolic link to nothing" in p.stdout, p.stdout + p.stderr
    assert os.readlink(lock) == str(tmp_path / "gone") and not os.path.lexists(tmp_path / "gone")


def test_a_second_call_waits_for_the_first_calls_lock(tmp_path):
    """Two flock_named calls on one file exclude each other (a hand mutant taking a shared lock let both in)."""
    path = tmp_path / "x.lock"
    first, _ = flock_named(path, os.O_RDWR)
    calls = []

    def waiting():
        calls.append(1)
        os.close(first)

    fd, made = flock_named(path, os.O_RDWR, waiting)
    os.close(fd)
    assert calls == [1] and not made
