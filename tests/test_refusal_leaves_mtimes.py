"""A refused command leaves the user's folders exactly as they were, their mtimes included: the checks that ask
whether a folder takes new entries (``check_creatable``, ``refuses_writes``) made a folder there and removed it,
which set the folder's mtime to the refusal's time (a refused ``resume=True`` changed those of ``output_dir``,
``logs/`` and ``recipe_state/``)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from run_folders import aged, stat_tree
from torchtune_longshort.config import values
from torchtune_longshort.config.values import UnwritablePath, check_creatable, refuses_writes


def aged_run(root: Path) -> Path:
    """A folder shaped as a run's (its mtimes aged by the test)."""
    out = root / "out"
    (out / "logs").mkdir(parents=True)
    (out / "recipe_state").mkdir()
    (out / "recipe_state" / "step_2.pt").write_bytes(b"x" * 10)
    (out / "metrics.jsonl").write_text("{}\n")
    return out


def test_the_writable_checks_leave_every_mtime(tmp_path):
    out = aged_run(tmp_path)
    before = aged(tmp_path)
    check_creatable("output_dir", str(out), writable=True)
    check_creatable("metric_logger.log_dir", str(out / "logs"), writable=True)
    check_creatable("profiler.output_dir", str(out / "profiling_outputs" / "x"), writable=True)  # its parent asked
    for p in (out / "recipe_state", out / "logs", out / "metrics.jsonl"):
        assert refuses_writes(p) is None
    assert stat_tree(tmp_path) == before


def test_a_folder_that_takes_no_entry_is_still_refused():
    assert refuses_writes(Path("/proc/self")) is not None  # root's permission bits say it takes writes
    with pytest.raises(UnwritablePath, match="does not take new"):
        check_creatable("--out", "/proc/self", writable=True)
    with pytest.raises(UnwritablePath, match="cannot be created"):
        check_creatable("--out", "/proc/longshort_x/y")


def test_without_o_tmpfile_the_folder_probe_still_decides(tmp_path, monkeypatch):
    monkeypatch.delattr(os, "O_TMPFILE", raising=False)
    assert values._refuses_new_folder(tmp_path) is None
    assert values._refuses_new_folder(Path("/proc")) is not None


@pytest.mark.skipif(not hasattr(os, "O_TMPFILE"), reason="a platform without O_TMPFILE takes the folder probe alone")
@pytest.mark.parametrize("errno_name", ["EOPNOTSUPP", "EISDIR", "EINVAL"])
def test_a_file_system_that_refuses_o_tmpfile_is_asked_with_the_folder_probe(tmp_path, monkeypatch, errno_name):
    """A file system without O_TMPFILE (its 'operation not supported'; a kernel before 3.11 reads it as O_DIRECTORY)
    takes new entries all the same: the folder probe decides, not O_TMPFILE's error."""
    import errno

    real_open = os.open

    def no_tmpfile(path, flags, *args, **kwargs):
        if flags & os.O_TMPFILE == os.O_TMPFILE:
            raise OSError(getattr(errno, errno_name), os.strerror(getattr(errno, errno_name)))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", no_tmpfile)
    assert values._refuses_new_folder(tmp_path) is None
    assert refuses_writes(tmp_path) is None
    assert values._refuses_new_folder(Path("/proc")) is not None
