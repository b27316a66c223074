"""Three hand mutants of data/file_paths.resolve_files survived every test that reaches it (mutants16): a glob's
matches taken in the order the file system lists them (not sorted), a glob's matching folder kept as a file to read,
and a path's '~' not expanded. A corpus read by local_text (path: a glob or '~/books') then read its documents in
another order on another machine, failed on a folder it cannot open, or was not found. The references: glob.glob
over the same pattern sorted by the test, os.path.isfile, and os.path.expanduser under the test's own HOME."""

from __future__ import annotations

import glob
import os

from torchtune_longshort.config import glob_match
from torchtune_longshort.data.file_paths import resolve_files


def _files(tmp_path, names):
    for name in names:
        (tmp_path / name).write_text(f"text of {name}\n")


def test_a_globs_matches_are_read_sorted_whatever_order_the_file_system_lists(tmp_path, monkeypatch):
    _files(tmp_path, ["c.txt", "a.txt", "b.txt"])
    pattern = str(tmp_path / "*.txt")
    reference = sorted(glob.glob(pattern))
    real = glob.glob
    monkeypatch.setattr(glob_match.glob, "glob", lambda p, *a, **k: sorted(real(p, *a, **k), reverse=True))
    assert [str(f) for f in resolve_files(pattern, [".txt"], "path")] == reference


def test_a_folder_a_glob_matches_is_not_taken_for_a_file(tmp_path):
    _files(tmp_path, ["a.txt", "b.txt"])
    (tmp_path / "c.txt").mkdir()  # a folder whose name the glob matches
    pattern = str(tmp_path / "*.txt")
    reference = [f for f in sorted(glob.glob(pattern)) if os.path.isfile(f)]
    assert len(reference) == 2
    assert [str(f) for f in resolve_files(pattern, [".txt"], "path")] == reference


def test_a_path_under_home_is_read_from_home(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "books").mkdir()
    _files(tmp_path / "books", ["one.txt"])
    for entry in ("~/books/one.txt", "~/books", "~/books/*.txt"):
        reference = os.path.expanduser(entry)
        assert [str(f) for f in resolve_files(entry, [".txt"], "path")] == sorted(glob.glob(reference + (
            "/*.txt" if os.path.isdir(reference) else ""))), entry
