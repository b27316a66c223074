"""disk_space.note_room / room_then: the room kept on an out-of-space error is the first measured (nearest the
failure), of the disk it was writing (``where``, else the file the error names), said "when <what>"; an error that is
no full disk keeps nothing; with nothing kept the room is measured now. References: errno's codes, and /proc (a
file system of 0 bytes, ``os.statvfs``) standing for another disk than the test's folder."""

import errno
import os

import pytest

from torchtune_longshort.disk_space import note_room, room_then

pytestmark = pytest.mark.skipif(not os.path.ismount("/proc"), reason="needs /proc mounted as its own file system")


def _full(path) -> OSError:
    return OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))


def test_the_first_room_kept_stays_and_is_said_when_the_write_failed(tmp_path):
    assert os.statvfs("/proc").f_blocks == 0  # the reference: a disk of no bytes, unlike the test's folder's
    e = _full(tmp_path / "model.bin")
    note_room(e, tmp_path)
    first = room_then(e, None, "the write failed")
    assert first.endswith(" when the write failed") and "/proc" not in first, first
    note_room(e, "/proc")  # measured later (after a cleanup): not the room the write found
    assert room_then(e, None, "the write failed") == first


def test_without_where_the_room_is_the_named_files_disk(tmp_path):
    e = _full(tmp_path / "model.bin")
    note_room(e)
    kept = room_then(e, "/proc", "the write failed")
    assert kept.endswith(" when the write failed") and "/proc" not in kept, kept


def test_an_error_that_is_no_full_disk_keeps_no_room(tmp_path):
    e = OSError(errno.EACCES, os.strerror(errno.EACCES), str(tmp_path / "model.bin"))
    note_room(e, tmp_path)
    assert room_then(e, None, "the write failed") == ""


def test_with_no_room_kept_the_room_is_measured_now():
    now = room_then(_full("/proc/x"), "/proc", "the write failed")
    assert now.endswith(" on /proc") and " when " not in now, now
