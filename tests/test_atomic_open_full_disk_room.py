"""A file written whole (``output_guard.atomic_open``: every report, results file, figure and config the commands
write) onto a disk that fills: its line said the room after the temporary file beside it was removed ("32 KiB free of
32 KiB ..."), a full disk reported empty. It now says the room the write found ("... when the write failed").
Reference: a real 32 KiB tmpfs (``disk_full.on_small_disk``, no root) and its own ``statvfs`` as the write failed,
the temporary file's bytes still in place. No torch in the fresh interpreter: about a second."""

from __future__ import annotations

import json
import sys

from disk_full import REPO, needs_unshare, on_small_disk

from torchtune_longshort.disk_space import size_text

WRITTEN_WHOLE = r"""
import json, os, sys
from pathlib import Path
from torchtune_longshort.output_guard import atomic_open
from torchtune_longshort.refusals import fault_line

disk, seen = Path(sys.argv[1]), {}

def free():
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

try:
    with atomic_open(disk / "results.json") as f:
        try:
            for _ in range(64):
                f.write("x" * 1024)
                f.flush()
        except OSError:
            seen["at_failure"] = free()[0]
            raise
except OSError as e:
    seen["line"] = fault_line(e)
seen["after"], seen["total"] = free()
seen["left"] = sorted(p.name for p in disk.iterdir())
print(json.dumps(seen))
"""


@needs_unshare
def test_a_file_written_whole_onto_a_full_disk_is_told_the_room_the_write_found(tmp_path):
    script, disk = tmp_path / "written.py", tmp_path / "disk"
    script.write_text(WRITTEN_WHOLE)
    p = on_small_disk(disk, "32k", f"{sys.executable} {script} {disk}", PYTHONPATH=REPO)
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert "at_failure" in seen and seen["left"] == [], p.stdout + p.stderr[-3000:]  # the temporary file went
    assert seen["after"] > seen["at_failure"], seen  # the cleanup gave back room the failed write did not have
    room = f"{size_text(seen['at_failure'])} free of {size_text(seen['total'])} on {disk} when the write failed"
    assert seen["line"].startswith(f"no space left on the disk writing {disk / 'results.json'} ({room}): "), seen
