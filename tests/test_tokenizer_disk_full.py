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
import os

import pytest
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
