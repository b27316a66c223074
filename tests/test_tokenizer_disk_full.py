"""A tokenizer folder the run trains (the tiny configs' stdlib component, ``tokenizer.path`` a folder to make) on a
full disk: the recipe said 'no space left on the disk while setting up output_dir <output_dir> (64.7 GiB free ...)
...; free space there, or set output_dir to a disk with room' (a 12 KiB-free tmpfs as tokenizer.path, output_dir on
a disk with room; with a few KiB free, 'tokenizer.path=...: ... cannot read it (Exception: No space left on device
(os error 28)); name a tokenizer fil' inside it): the wrong disk, the wrong key. It now names tokenizer.path and its
disk's room. The full disk is simulated by patching the training call, in this process: a real one
(``disk_full.on_small_disk``, no root) needs a fresh interpreter in its namespace, and importing the recipe there took
about 9 s a case (a 12k and a 4k tmpfs, walked so); the two errors are those the walk saw: an OSError from Python's own
writes, the ``tokenizers`` library's plain Exception."""

from __future__ import annotations

import errno
import json
import os
import sys

import pytest
from disk_full import needs_unshare, on_small_disk
from recipe_config import make_cfg


@pytest.mark.parametrize("error", [OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)),
                                   Exception("No space left on device (os error 28)")], ids=["oserror", "tokenizers"])
def test_a_tokenizer_trained_onto_a_full_disk_names_tokenizer_path(tmp_path, tiny_llama2_dir, monkeypatch, error):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.refusals import REFUSED, fault_line
    from torchtune_longshort.training import bootstrap

    def full(documents, folder, **kwargs):
        raise error

    monkeypatch.setattr(bootstrap, "train_sentencepiece", full)
    tok, out = tmp_path / "tokdisk" / "tok", tmp_path / "run"
    cfg = make_cfg(tiny_llama2_dir, tmp_path, out, tokenizer={
        "_component_": "torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer", "path": str(tok),
        "vocab_size": 512})
    with pytest.raises(Exception) as raised:
        LongShortFinetuneRecipe(cfg).setup()
    line = fault_line(raised.value)
    assert isinstance(raised.value, REFUSED), raised.value
    assert line.startswith(f"no space left on the disk training the tokenizer into tokenizer.path={str(tok)!r} ("), line
    assert " free of " in line and line.endswith("free space there, or set tokenizer.path to a disk with room"), line
    assert "output_dir" not in line and str(out) not in line
    assert not out.exists() and not (tmp_path / "tokdisk").exists()  # nothing of the refused run left


TRAINED_ONTO_THE_DISK = r"""
import json, os, sys
from pathlib import Path
from torchtune_longshort.refusals import fault_line
from torchtune_longshort.training import bootstrap
from torchtune_longshort.training.recipe_config.components import TokenizerConfig
from torchtune_longshort.training.recipe_config.tokenizer_check import load_tokenizer

disk = Path(sys.argv[1])
tok, train, seen = str(disk / "tok"), bootstrap.train_sentencepiece, {}

def free():
    st = os.statvfs(disk)
    return st.f_bavail * st.f_frsize, st.f_blocks * st.f_frsize

def trained(*args, **kwargs):  # the training's failed write, its bytes still on the disk
    try:
        return train(*args, **kwargs)
    except Exception:
        seen["at_failure"] = free()[0]
        raise

bootstrap.train_sentencepiece = trained
component = "torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer"
try:
    load_tokenizer(TokenizerConfig(component=component, path=tok,
                                   args={"path": tok, "vocab_size": 400, "train_files_limit": 20}))
except Exception as e:
    seen["line"] = fault_line(e)
seen["after"], seen["total"] = free()
seen["left"] = sorted(p.name for p in disk.iterdir())
print(json.dumps(seen))
"""


@pytest.mark.slow  # a fresh interpreter imports torchtune and trains in the namespace: ~7 s of CPU, 15-34 s here
@needs_unshare
def test_a_tokenizer_trained_onto_a_full_disk_is_told_the_room_its_writes_found(tmp_path):
    """A real 12 KiB tmpfs as ``tokenizer.path``'s disk (``disk_full.on_small_disk``, no root): the line said "(12 KiB
    free of 12 KiB ...)", the room after the folder the training wrote aside was removed. Reference: the tmpfs's own
    ``statvfs`` as the training's write failed."""
    from disk_full import REPO

    from torchtune_longshort.disk_space import size_text

    script, disk = tmp_path / "trained.py", tmp_path / "disk"
    script.write_text(TRAINED_ONTO_THE_DISK)
    p = on_small_disk(disk, "12k", f"{sys.executable} {script} {disk}", PYTHONPATH=REPO, TMPDIR=tmp_path)
    seen = json.loads(p.stdout.strip().splitlines()[-1])
    assert "at_failure" in seen and seen["left"] == [], p.stdout + p.stderr[-3000:]  # nothing of the training left
    assert seen["after"] > seen["at_failure"], seen  # the cleanup gave back room the failed write did not have
    room = f"{size_text(seen['at_failure'])} free of {size_text(seen['total'])} on {disk} when the write failed"
    assert seen["line"].startswith(f"no space left on the disk training the tokenizer into tokenizer.path="
                                   f"{str(disk / 'tok')!r} ({room}): "), seen["line"]
