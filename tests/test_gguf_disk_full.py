"""``--gguf F --out DIR`` whose disk filled while the converted folder was written (past the room check: another
process wrote meanwhile, a quota): the line said 'no space left on the disk: No space left on device (os error 28);
free space there, ...', naming neither the file nor the folder (safetensors' error names none; a 60 KiB-free tmpfs,
the walk's). It now names ``--out`` and its disk's room. The full disk is simulated by patching the model's
``save_pretrained`` to raise what safetensors raised on the tmpfs (a real tmpfs needs root)."""

from __future__ import annotations

import errno
import os
import re
from pathlib import Path

import pytest
from disk_full import REPO, needs_unshare, on_small_disk

pytest.importorskip("gguf")

from test_gguf_files import _refused, sentencepiece_gguf  # noqa: E402


def test_a_disk_that_fills_while_the_folder_is_written_is_named(tmp_path, sp_tokenizer_dir, capsys, monkeypatch):
    from safetensors import SafetensorError
    from transformers import PreTrainedModel

    def full(self, *args, **kwargs):  # what safetensors' save_file raised on the walk's full tmpfs, word for word
        raise SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")

    monkeypatch.setattr(PreTrainedModel, "save_pretrained", full)
    gguf = sentencepiece_gguf(tmp_path / "m.gguf", (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes())
    out = tmp_path / "new" / "conv"  # the --out _refused passes; nothing of it (nor new/) left
    line = _refused(gguf, tmp_path, capsys, f"no space left on the disk writing {out} (")
    assert line.endswith("[Errno 28] No space left on device; free space there, or write to a disk with room, and "
                         "run again"), line


@pytest.mark.slow  # a fresh interpreter converts in the namespace: about 10 s
@needs_unshare
def test_a_file_the_disk_had_no_room_for_is_named_under_out_not_in_the_folder_aside(tmp_path, sp_tokenizer_dir):
    """A file whose creation found the disk full (a tmpfs of 4 inodes, ``disk_full.on_small_disk``: a real ENOSPC from
    ``open``, which names its file): the line named it in the folder the conversion writes beside ``--out``
    (".../.conv.converting_x/generation_config.json"), gone by the time the user read it; it names the file under
    ``--out`` now, as the study's pre-flight and peft-base do (``made_folders.named_in_place``)."""
    gguf = sentencepiece_gguf(tmp_path / "m.gguf", (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes())
    disk = tmp_path / "disk"
    out = disk / "conv"
    p = on_small_disk(disk, "1m,nr_inodes=4", f"python -m torchtune_longshort.models.gguf --gguf {gguf} --out {out}; "
                      f"echo \"#rc $?\"; ls -A {disk}")
    assert p.stdout.split("#rc ")[1].split() == ["2"], p.stdout + p.stderr  # exit 2, and nothing left on the disk
    line = p.stderr.strip().splitlines()[-1]
    written = re.search(r"no space left on the disk writing (\S+) \(", line)
    assert written and Path(written[1]).parent == out, line
    assert ".conv.converting_" not in line and f"[Errno {errno.ENOSPC}] {os.strerror(errno.ENOSPC)}" in line, line


FILLED_AS_IT_WRITES = r"""
import json, os, sys
from pathlib import Path
from torchtune_longshort.models import gguf as conversion

gguf, disk = map(Path, sys.argv[1:3])
named_in_place, seen = conversion.named_in_place, {}

def free():
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

def at_the_failure(error, aside, target):  # called as the failed write is handled, its bytes still in place
    seen["at_failure"] = free()[0]
    return named_in_place(error, aside, target)

conversion.named_in_place = at_the_failure
try:
    conversion.main(["--gguf", str(gguf), "--out", str(disk / "conv")])
except SystemExit as e:
    seen["rc"] = e.code
seen["after"], seen["total"] = free()
print(json.dumps(seen))
"""


@pytest.mark.slow  # a fresh interpreter converts in the namespace: about 10 s
@needs_unshare
def test_a_full_disk_is_told_with_the_room_the_write_found_not_the_room_its_cleanup_left(tmp_path, sp_tokenizer_dir):
    """A 64 KiB tmpfs that passes the room check (the walk's) but fills as the folder is written: the line said
    "(64 KiB free of 64 KiB ...)", the room after the folder aside was removed. Reference: the tmpfs's own
    ``statvfs`` at the failure."""
    import json
    import sys

    from torchtune_longshort.disk_space import size_text

    gguf = sentencepiece_gguf(tmp_path / "m.gguf", (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes())
    script, disk = tmp_path / "filled.py", tmp_path / "disk"
    script.write_text(FILLED_AS_IT_WRITES)
    p = on_small_disk(disk, "64k", f"{sys.executable} {script} {gguf} {disk}", PYTHONPATH=REPO)
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen.get("rc") == 2 and "at_failure" in seen, p.stdout + p.stderr[-3000:]
    assert seen["after"] > seen["at_failure"], seen  # the cleanup gave back room the failed write did not have
    line = p.stderr.strip().splitlines()[-1]
    room = f"{size_text(seen['at_failure'])} free of {size_text(seen['total'])} on {disk} when the write failed"
    assert f"no space left on the disk writing {disk / 'conv'} ({room}): [Errno 28] " in line, line
