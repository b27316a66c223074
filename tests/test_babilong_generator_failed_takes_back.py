"""A BABILong generator run that failed part way (a full disk, Ctrl-C) left in --out a 3-byte '[]' file list and an
empty length folder ('1k/'), which nobody had asked for and which the next run's folder check had to read. It now
takes back what it made and left empty: the length folders, --out and the parents it made, and the list it created
with no name left on it; a folder or a list that was there before stays. The reference: the folder's listing before
the run, and the kernel's ENOSPC."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest

from torchtune_longshort.eval.tasks.babilong import generator
from torchtune_longshort.eval.tasks.babilong.generator import WRITTEN, generate


def _listing(root: Path):
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*"))


def _disk_full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_a_failed_run_takes_back_the_folders_and_list_it_made(tmp_path, monkeypatch):
    monkeypatch.setattr(generator, "build_sample", _disk_full)
    monkeypatch.chdir(tmp_path)  # --out as typed, relative
    with pytest.raises(OSError) as e:
        generate("made/out", ["qa1"], ["0k"], n=1)
    assert e.value.errno == errno.ENOSPC
    assert _listing(tmp_path) == []  # --out and the parent it made with it are gone: nothing was there before


def test_what_was_there_before_stays(tmp_path, monkeypatch):
    out = tmp_path / "out"
    generate(out, ["qa1"], ["0k"], n=1)  # an earlier run: its list and its length folder
    (out / "empty_of_the_users").mkdir()
    before = _listing(tmp_path)
    monkeypatch.setattr(generator, "build_sample", _disk_full)
    with pytest.raises(OSError):
        generate(out, ["qa2"], ["0k"], n=1)
    assert _listing(tmp_path) == before
    assert (out / WRITTEN).read_text().split() == ["[", '"0k/qa1.jsonl"', "]"]  # the earlier run's name stays listed
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(OSError):
        generate(empty, ["qa1"], ["0k"], n=1)
    assert _listing(tmp_path) == sorted(before + ["empty"])  # a user's empty --out stays, emptied of what the run made
