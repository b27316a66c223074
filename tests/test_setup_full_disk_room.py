"""A recipe whose disk fills while its setup writes (a from-scratch run's step_0: its weights written, then its
tokenizer copy finds no room) said "no space left on the disk while setting up output_dir ... (<room>)" with the room
measured after its cleanup had removed the folder it made: the weights' room back, a full disk reported with room.
It now says the room the setup found, "... when the setup failed". Reference: the tmpfs's own ``statvfs`` at the
failure, with the run's step_0 weights still in place (a real 8 MiB tmpfs, filled by another process's file)."""

from __future__ import annotations

import json
import sys

import pytest
from disk_full import needs_unshare, on_small_disk

from torchtune_longshort.disk_space import size_text

FILLED_AS_IT_WRITES = r"""
import json, os, sys
from pathlib import Path
from omegaconf import OmegaConf
from torchtune_longshort.models import hf_checkpoint_writer
from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
from torchtune_longshort.refusals import fault_line

repo, disk, tok = map(Path, sys.argv[1:4])
copy_tokenizer, seen = hf_checkpoint_writer.copy_tokenizer, {}

def free():
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

def filled_then_copied(*args, **kwargs):  # another process fills the disk once step_0's weights are written
    with open(disk / "theirs.bin", "wb", buffering=0) as f:
        try:
            while True:
                f.write(b"x" * 4096)
        except OSError:
            pass
    try:
        return copy_tokenizer(*args, **kwargs)
    except OSError:
        seen["at_failure"] = free()[0]
        raise

hf_checkpoint_writer.copy_tokenizer = filled_then_copied
cfg = OmegaConf.load(repo / "configs/tiny/longshort_stdlib.yaml")
cfg.output_dir, cfg.validation = str(disk / "run"), None
cfg.tokenizer = {"_component_": "torchtune.models.llama2.llama2_tokenizer", "path": str(tok / "tokenizer.model")}
for key, value in dict(num_layers=2, embed_dim=64, intermediate_dim=172, num_heads=4, num_kv_heads=2).items():
    cfg.model[key] = value
try:
    LongShortFinetuneRecipe(cfg).setup()
except Exception as e:
    seen["line"] = fault_line(e)
seen["after"], seen["total"] = free()
seen["left"] = sorted(p.name for p in disk.iterdir())
print(json.dumps(seen))
"""


@pytest.mark.slow
@needs_unshare
def test_a_setup_that_fills_the_disk_is_told_the_room_it_found(tmp_path, sp_tokenizer_dir):
    from disk_full import REPO

    script, disk = tmp_path / "filled.py", tmp_path / "disk"
    script.write_text(FILLED_AS_IT_WRITES)
    p = on_small_disk(disk, "8m", f"{sys.executable} {script} {REPO} {disk} {sp_tokenizer_dir}", TMPDIR=tmp_path)
    assert p.returncode == 0, p.stderr[-3000:]
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert seen["left"] == ["theirs.bin"], seen  # the cleanup took back the run's folder, not the other file
    assert seen["after"] > seen["at_failure"], seen  # the weights it removed: room the failed write did not have
    line = seen["line"]
    assert line.startswith(f"no space left on the disk while setting up output_dir {disk / 'run'} "), line
    room = f"{size_text(seen['at_failure'])} free of {size_text(seen['total'])} on {disk} when the setup failed"
    assert f"({room}): [Errno 28] " in line, line
