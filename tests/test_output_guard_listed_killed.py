"""A report or study run (``output_guard.undone_on_failure``) listed a file's name in ``.longshort_writing`` before
the file was in place: killed with SIGKILL in between, it left a listed name with no file, and the next run took a
file of the user's put at that name for its own (``check_output_folder`` trusts the list) and overwrote it. The
reference: ``os.path.isfile`` of each name the list holds, read with json, after a real SIGKILL of a writer the
moment its list names a file, and the user's file at the unwritten name refused and kept."""

from __future__ import annotations

import json
import os
import time

import pytest
from killed_when import killed_when

from torchtune_longshort.output_guard import WRITING, atomic_open, check_output_folder, undone_on_failure

PATTERNS = ("out_*.txt",)
NAMES = ("out_a.txt", "out_b.txt")


def _write_slowly(folder) -> None:
    """Each file written slowly (a figure drawn into it), so that a kill lands while one is being written."""
    with undone_on_failure(folder, PATTERNS):
        for name in NAMES:
            with atomic_open(folder / name, "w") as f:
                for _ in range(200):
                    f.write(name)
                    time.sleep(0.002)


def test_a_killed_writer_lists_no_file_it_did_not_write(tmp_path):
    folder = tmp_path / "rep"
    killed_when(lambda: _write_slowly(folder),
                lambda: bool(set(json.loads((folder / WRITING).read_text())) & set(NAMES)))
    listed = [n for n in json.loads((folder / WRITING).read_text()) if n in NAMES]
    assert listed and [n for n in listed if not os.path.isfile(folder / n)] == []
    missing = [n for n in NAMES if not os.path.isfile(folder / n)]
    assert missing  # killed while the second file was written
    for name in missing:
        (folder / name).write_text("the user's")
    with pytest.raises(FileExistsError, match="which no earlier run there wrote"):
        check_output_folder(folder, "--out", PATTERNS, lambda f: False)
    assert all((folder / n).read_text() == "the user's" for n in missing)
