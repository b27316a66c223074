"""A data glob follows a link to a folder below its fixed head as a folder path does, and as ``datasets``'
``data_files`` does: not at all. ``dataset.path='books/*/*.txt'`` over ``books/link -> ../elsewhere`` and
``books/link2 -> ../elsewhere`` read ``elsewhere/c.txt`` twice (and ``books/same -> sub`` read ``sub/b.txt`` twice),
where ``dataset.path='books'`` read each once and ``datasets`` reads neither link; a document read twice changes the
training data and the perplexity."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from torchtune_longshort.data.file_paths import resolve_files


def _linked_books(root: Path) -> None:
    for rel in ("elsewhere/c.txt", "books/a.txt", "books/sub/b.txt", "books/sub/deep/d.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"the text of {rel}\n")
    os.symlink("../elsewhere", root / "books/link")
    os.symlink("../elsewhere", root / "books/link2")  # two links to one folder
    os.symlink("sub", root / "books/same")  # a link beside its target
    os.symlink("a.txt", root / "books/alink.txt")  # a link to a file: read, as datasets reads it
    os.symlink("../..", root / "books/sub/up")  # a loop


@pytest.mark.parametrize("pattern", ["books/*/*.txt", "books/**/*.txt", "books/**", "**/*.txt", "*/*/*.txt",
                                     "books/s*/*.txt", "./books/*/*/*.txt", "books/link/*.txt"])
def test_a_glob_reads_the_files_datasets_reads(tmp_path, monkeypatch, pattern):
    from datasets.data_files import resolve_pattern

    monkeypatch.chdir(tmp_path)
    _linked_books(tmp_path)
    expected = sorted(os.path.relpath(f, tmp_path) for f in resolve_pattern(pattern, base_path=str(tmp_path)))
    got = sorted(os.path.normpath(f) for f in resolve_files(pattern, (".txt",), "dataset.path"))
    assert got == expected


def test_a_glob_and_its_folder_read_the_same_files(tmp_path, monkeypatch):
    """One rule for both: ``books`` and ``books/**/*.txt`` name the same files, each file once."""
    monkeypatch.chdir(tmp_path)
    _linked_books(tmp_path)
    folder = resolve_files("books", (".txt",), "dataset.path")
    globbed = resolve_files("books/**/*.txt", (".txt",), "dataset.path")
    assert sorted(map(os.path.normpath, globbed)) == sorted(map(os.path.normpath, folder))
    real = [os.path.realpath(f) for f in resolve_files("books/*/*.txt", (".txt",), "dataset.path")]
    assert len(real) == len(set(real)) == 1
