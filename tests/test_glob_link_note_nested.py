"""The path a skipped-link note suggests for ``data/**/*.txt`` keeps the pattern's ``**``: a linked corpus whose files
lie in folders below the link (``data/pg19 -> ../big/pg19``, ``big/pg19/part1/b.txt``) is read whole through it. The
reference: ``pathlib``'s own glob of the user's pattern on the same tree with the link a real folder (copied, links
followed)."""

from __future__ import annotations

import logging
import os
import re
import shutil
from pathlib import Path

from torchtune_longshort.data.file_paths import resolve_files


def _tree(root: Path, linked: bool) -> None:
    for rel in ("big/pg19/a.txt", "big/pg19/part1/b.txt", "big/pg19/part1/deeper/c.txt", "data/local/l.txt"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(f"the text of {rel}\n")
    if linked:
        os.symlink("../big/pg19", root / "data/pg19")
    else:
        shutil.copytree(root / "big/pg19", root / "data/pg19")


def test_the_suggested_path_reads_every_file_the_pattern_would_read_through_a_folder(tmp_path, monkeypatch, caplog):
    (tmp_path / "real").mkdir()
    _tree(tmp_path / "real", linked=False)
    expected = sorted(p.relative_to(tmp_path / "real").as_posix() for p in (tmp_path / "real").glob("data/**/*.txt")
                      if "pg19" in p.parts)
    assert expected == ["data/pg19/a.txt", "data/pg19/part1/b.txt", "data/pg19/part1/deeper/c.txt"]
    (tmp_path / "linked").mkdir()
    _tree(tmp_path / "linked", linked=True)
    monkeypatch.chdir(tmp_path / "linked")
    with caplog.at_level(logging.WARNING, logger="torchtune_longshort.data.file_paths"):
        assert resolve_files("data/**/*.txt", (".txt",), "dataset.path#nested") == [Path("data/local/l.txt")]
    note = next(r.getMessage() for r in caplog.records if "not followed" in r.getMessage())
    fix = re.search(r"name the link itself, '([^']+)'", note).group(1)
    assert sorted(map(str, resolve_files(fix, (".txt",), "dataset.path"))) == expected
