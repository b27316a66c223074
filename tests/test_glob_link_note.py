"""A corpus linked into a data folder (``data/pg19 -> ../big/pg19``) is not read through ``data/*/*.txt``, ``data/**``
or ``data`` (no link below a path's fixed part is followed, as ``datasets``' ``data_files`` follows none): since
3644038 it was left out without a word, and a path whose only files lay behind such links was refused as naming
nothing, without saying why. Now one warning names how many links were left out, the first, and the path that reads
it; a refusal says the same. References: the links made here (``os.readlink``), and ``datasets``' own
``resolve_pattern`` of the suggested path, which must read the linked corpus's files."""

from __future__ import annotations

import logging
import os
import re
from pathlib import Path

import pytest

from torchtune_longshort.data.file_paths import resolve_files


def _tree(root: Path) -> None:
    for rel in ("big/pg19/b1.txt", "big/pg19/b2.txt", "big/web/w.txt", "data/local/l.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"the text of {rel}\n")
    (root / "big/empty").mkdir()
    os.symlink("../big/pg19", root / "data/pg19")
    os.symlink("../big/web", root / "data/web")
    os.symlink("../big/empty", root / "data/empty")  # no file behind it: not worth a word
    (root / "only").mkdir()
    os.symlink("../big/pg19", root / "only/pg19")


def _suggested(text: str) -> str:
    return re.search(r"name the link itself, '([^']+)'", text).group(1)


@pytest.mark.parametrize("path", ["data/*/*.txt", "data/**/*.txt", "data"])
def test_links_left_out_are_named_once_with_the_path_that_reads_them(tmp_path, monkeypatch, caplog, path):
    from datasets.data_files import resolve_pattern

    monkeypatch.chdir(tmp_path)
    _tree(tmp_path)
    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.data.file_paths"):
        first = resolve_files(path, (".txt",), f"dataset.path#{path}")
        again = resolve_files(path, (".txt",), f"dataset.path#{path}")
    assert first == again == [Path("data/local/l.txt")]
    notes = [r.getMessage() for r in caplog.records if "not followed" in r.getMessage()]
    assert len(notes) == 1, notes  # once per data path, however often it is resolved
    assert "2 links" in notes[0] and f"data/pg19 -> {os.readlink('data/pg19')}" in notes[0]
    fix = _suggested(notes[0])
    pattern = fix if "*" in fix else f"{fix}/**"
    expected = sorted(os.path.relpath(f, tmp_path) for f in resolve_pattern(pattern, base_path=str(tmp_path)))
    assert expected == ["data/pg19/b1.txt", "data/pg19/b2.txt"]
    assert sorted(map(str, resolve_files(fix, (".txt",), "dataset.path"))) == expected


@pytest.mark.parametrize("path", ["only/*/*.txt", "only/**/*.txt", "only"])
def test_a_path_whose_only_files_lie_behind_links_is_refused_naming_them(tmp_path, monkeypatch, path):
    monkeypatch.chdir(tmp_path)
    _tree(tmp_path)
    with pytest.raises(FileNotFoundError) as e:
        resolve_files(path, (".txt",), "dataset.path")
    assert f"only/pg19 -> {os.readlink('only/pg19')}" in str(e.value)
    assert [str(f) for f in resolve_files(_suggested(str(e.value)), (".txt",), "dataset.path")] == [
        "only/pg19/b1.txt", "only/pg19/b2.txt"]


@pytest.mark.parametrize("path", ["only/*/*.txt", "only/**/*.txt"])
def test_the_configs_check_of_such_a_path_names_the_links_too(tmp_path, monkeypatch, path):
    from torchtune_longshort.data.data_files import named_path

    monkeypatch.chdir(tmp_path)
    _tree(tmp_path)
    with pytest.raises(FileNotFoundError, match=re.escape(f"only/pg19 -> {os.readlink('only/pg19')}")):
        named_path({"path": path}, "dataset")
