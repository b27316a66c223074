"""The edges of disk_space.py that a real full disk seldom shows: 'full' is less than FULL_BELOW free, a write fits
exactly the room there is, only a write error (not a refusal of a value) is taken for a full disk's, a copy's
destination is the file named, and an exception chain that loops ends.

References: the module's documented thresholds with the disk's room put in place (disk_space.room); OSError's own
filename / filename2 fields."""

import errno
from pathlib import Path

import pytest

from torchtune_longshort import disk_space


@pytest.fixture
def free_bytes(monkeypatch):
    def put(free):
        monkeypatch.setattr(disk_space, "room", lambda path: (free, 10 * disk_space.FULL_BELOW, Path("/")))
    return put


def test_full_is_less_than_full_below_free(free_bytes, tmp_path):
    free_bytes(disk_space.FULL_BELOW - 1)
    assert disk_space.is_full(tmp_path)
    free_bytes(disk_space.FULL_BELOW)
    assert not disk_space.is_full(tmp_path)


def test_a_write_of_exactly_the_free_bytes_fits(free_bytes, tmp_path):
    free_bytes(5000)
    disk_space.check_room(tmp_path, 5000, "the file", "free space")
    with pytest.raises(ValueError, match=r"^the file needs at least 4.88 KiB, more than the 4.88 KiB free of "):
        disk_space.check_room(tmp_path, 5001, "the file", "free space")


def test_on_a_full_disk_only_a_write_error_is_taken_for_the_full_disk(free_bytes, tmp_path):
    free_bytes(0)
    assert disk_space.is_out_of_space(RuntimeError("unexpected pos 64 vs 0"), tmp_path)
    assert disk_space.is_out_of_space(OSError(errno.EIO, "Input/output error"), tmp_path)
    assert not disk_space.is_out_of_space(ValueError("loss.alpha=-1: must be >= 0"), tmp_path)
    assert not disk_space.is_out_of_space(KeyError("max_step"), tmp_path)


def test_a_copys_destination_is_the_file_named():
    error = OSError(errno.ENOSPC, "No space left on device", "/src/model.bin", None, "/dst/model.bin")
    assert (error.filename, error.filename2) == ("/src/model.bin", "/dst/model.bin")  # the reference
    assert disk_space.written_file(RuntimeError("copy failed")) is None
    wrapped = RuntimeError("copy failed")
    wrapped.__cause__ = error
    assert disk_space.written_file(wrapped) == "/dst/model.bin"


class _Counted:
    """An exception whose ``__cause__`` reads are counted: a walk that read one more than twice per exception of its
    chain went round the loop, and raises instead of spinning forever, so the test fails rather than hangs."""
    reads = 0

    @property
    def __cause__(self):
        _Counted.reads += 1
        if _Counted.reads > 8:
            raise AssertionError("the chain's walk went round its loop")
        return self._cause

    @__cause__.setter
    def __cause__(self, cause):
        self._cause = cause


class _LoopingRuntimeError(_Counted, RuntimeError):
    pass


class _LoopingOSError(_Counted, OSError):
    pass


def _loop(a, b):
    a.__cause__, b.__cause__ = b, a  # raise a from b, after raise b from a: Python keeps the loop
    _Counted.reads = 0
    return a


def test_an_exception_chain_that_loops_ends():
    assert not disk_space.is_out_of_space(_loop(_LoopingRuntimeError("a"), _LoopingRuntimeError("b")))
    # each walk returns, with what the chain's members say (their own fields the reference)
    full = _LoopingOSError(errno.ENOSPC, "No space left on device")
    assert (full.errno, full.strerror, full.filename) == (errno.ENOSPC, "No space left on device", None)
    assert disk_space.written_file(_loop(_LoopingRuntimeError("save failed"), full)) is None
    assert disk_space.reason(_loop(_LoopingRuntimeError("save failed"), full)) == "[Errno 28] No space left on device"
    assert disk_space.is_out_of_space(_loop(_LoopingRuntimeError("save failed"), full))
    named = _LoopingOSError(errno.ENOSPC, "No space left on device", "/run/step_1/model.safetensors")
    assert disk_space.written_file(_loop(_LoopingRuntimeError("a"), named)) == named.filename
    assert disk_space.reason(_loop(_LoopingRuntimeError("a"), _LoopingRuntimeError("b"))) == "a"
    assert disk_space.written_file(_loop(_LoopingRuntimeError("a"), _LoopingRuntimeError("b"))) is None
