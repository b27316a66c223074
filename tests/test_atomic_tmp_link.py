"""A symbolic link where a command writes its temporary file (``<path>.tmp``, :func:`output_guard.atomic_open`: every
report, result and copied config) is the user's: refused, never written through. Before, a link to a file emptied
that file, wrote the command's output into it and moved the link into place as ``<path>``; a link to nothing was
opened again and again, the command never ending. The references: the bytes the test wrote, ``os.readlink``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchtune_longshort.output_guard import atomic_write_text


def test_a_link_at_the_temporary_files_name_is_refused_and_its_target_kept(tmp_path):
    mine = tmp_path / "elsewhere" / "notes.txt"
    mine.parent.mkdir()
    mine.write_bytes(b"my own notes\n")
    out = tmp_path / "run.yaml"
    os.symlink(mine, tmp_path / "run.yaml.tmp")
    with pytest.raises(FileExistsError) as e:
        atomic_write_text(out, "the command's output\n")
    assert "run.yaml.tmp is a symbolic link" in str(e.value) and "move it away" in str(e.value)
    assert mine.read_bytes() == b"my own notes\n"
    assert os.readlink(tmp_path / "run.yaml.tmp") == str(mine) and not os.path.lexists(out)


def test_a_link_to_nothing_at_the_temporary_files_name_is_refused_not_spun_on(tmp_path):
    out = tmp_path / "report.md"
    os.symlink(tmp_path / "gone.txt", tmp_path / "report.md.tmp")
    code = ("import sys\nfrom torchtune_longshort.output_guard import atomic_write_text\n"
            "try:\n    atomic_write_text(sys.argv[1], 'x')\nexcept FileExistsError as e:\n    print(e.strerror)\n")
    try:
        p = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, timeout=10,
                           env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    except subprocess.TimeoutExpired:
        pytest.fail("atomic_write_text spun on a link to nothing for 10 s")
    assert p.returncode == 0 and "report.md.tmp is a symbolic link" in p.stdout, p.stdout + p.stderr
    assert os.readlink(tmp_path / "report.md.tmp") == str(tmp_path / "gone.txt")
    assert not os.path.lexists(out) and not os.path.lexists(tmp_path / "gone.txt")
