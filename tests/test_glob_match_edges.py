"""Edges of :mod:`torchtune_longshort.config.glob_match` checked against ``glob.glob(recursive=True)`` itself: a hidden
name named by a dotted pattern name under ``**``, magic before the ``**`` (the walk's fixed start), ``[!]...]`` and
``[]...]`` classes, and a glob whose folder is reached through a link to where the command writes."""

from __future__ import annotations

import glob
import os
from pathlib import Path

import pytest

from torchtune_longshort.config.glob_match import glob_files, glob_meets


def _tree(root: Path, rels) -> None:
    for rel in rels:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("a line\n")


@pytest.mark.parametrize("pattern", ["**/.h*.txt", "a/**/.*", "[a]/**/*.txt", "a*/**/*.txt", "*/b/**/*.txt"])
def test_deep_glob_reads_what_glob_recursive_reads(tmp_path, monkeypatch, pattern):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, ("notes.txt", ".h0.txt", "a/x.txt", "a/.h.txt", "a/b/y.txt", "a/b/.h2.txt", "a/b/c/z.txt",
                     "ab/q.txt", ".hid/h.txt", "d/.hb.txt"))
    expected = sorted(os.path.normpath(f) for f in glob.glob(pattern, recursive=True) if os.path.isfile(f))
    assert expected  # the case exercises something
    assert [os.path.normpath(f) for f in glob_files(pattern)] == expected


@pytest.mark.parametrize("pattern", ["[!]]*.txt", "[]a]*.txt", "[!]a]*.txt", "[]]*.txt", "[!a]*.txt"])
def test_a_class_opening_with_a_bracket_meets_what_glob_matches(tmp_path, monkeypatch, pattern):
    monkeypatch.chdir(tmp_path)
    written = ["]x.txt", "a.txt", "b.txt", "!c.txt"]
    _tree(tmp_path, written)
    matched = {os.path.normpath(f) for f in glob.glob(pattern, recursive=True)}
    assert {w for w in written if glob_meets(pattern, w)} == matched


def test_a_glob_through_a_link_meets_the_file_written_at_the_real_folder(tmp_path, monkeypatch):
    """``--haystack 'books/*.txt'`` with ``books -> store`` and the output written into ``store``: the next run's glob
    reads it back (``glob.glob`` lists it), so the two meet."""
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path, ("store/x.txt",))
    os.symlink("store", "books")
    assert os.path.samefile(glob.glob("books/*.txt")[0], "store/x.txt")
    assert glob_meets("books/*.txt", "store/x.txt")
    assert glob_meets(str(tmp_path / "books" / "*.txt"), "store/x.txt")
