"""A data glob whose last name matches a link to a file reads it (``books/*.txt`` over ``books/alink.txt -> a.txt``),
as ``datasets``' ``data_files`` reads it: only links to folders below the fixed head are left out. The reference:
``datasets.data_files.resolve_pattern`` on the same tree."""

from __future__ import annotations

import os

import pytest

from test_glob_links import _linked_books

from torchtune_longshort.data.file_paths import resolve_files


@pytest.mark.parametrize("pattern", ["books/*.txt", "books/a*", "books/sub/../*.txt"])
def test_a_link_to_a_file_in_the_last_name_is_read(tmp_path, monkeypatch, pattern):
    from datasets.data_files import resolve_pattern

    monkeypatch.chdir(tmp_path)
    _linked_books(tmp_path)
    expected = sorted(os.path.relpath(f, tmp_path) for f in resolve_pattern(pattern, base_path=str(tmp_path)))
    assert "books/alink.txt" in expected
    got = sorted(os.path.normpath(f) for f in resolve_files(pattern, (".txt",), "dataset.path"))
    assert got == expected
