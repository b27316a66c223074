"""resume=True where only step_0 (a run from scratch: its random start, read again on resume) lost its tokenizer
files was refused by the checkpoint's own line, no fix; it now names the step to copy them from, as the newest
step's refusal does (tests/test_resume_lost_tokenizer.py), and doing what it says lets the start folder be read."""

from __future__ import annotations

import re
import shutil
from types import SimpleNamespace

import pytest
import torch


def test_step_0_without_its_tokenizer_is_refused_naming_where_to_copy_it_from(tmp_path, sp_tokenizer_dir):
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune_longshort.models.hf_model import decoder_config, hf_decoder
    from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path
    from torchtune_longshort.training.recipe_checkpoints import start_state_dict

    def check_start_tokenizer(ckpts, resume_dir):  # the recipe's start on resume, from scratch, full fine-tuning
        config = SimpleNamespace(checkpointer=SimpleNamespace(checkpoint_dir=None))
        start_state_dict(config, ckpts, resume_dir, SimpleNamespace(enabled=False), 0, True, lambda: None)

    out = tmp_path / "run"
    node = dict(family="llama", vocab_size=512, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                max_seq_len=128)
    write_hf_checkpoint(out / "step_0", hf_decoder(**node).state_dict(), decoder_config(node),
                        tokenizer=sp_tokenizer_dir)
    shutil.copytree(out / "step_0", out / "step_2")
    recipe_state_path(out / "step_2").parent.mkdir()
    torch.save({"config": {"tokenizer": {"path": str(sp_tokenizer_dir)}}}, recipe_state_path(out / "step_2"))
    ckpts = StepCheckpoints(out)
    check_start_tokenizer(ckpts, out / "step_2")  # whole: nothing said
    original = {f: (out / "step_0" / f).read_bytes() for f in ("tokenizer.model", "tokenizer.json")}
    for f in original:
        (out / "step_0" / f).unlink()
    with pytest.raises(FileNotFoundError) as e:
        check_start_tokenizer(ckpts, out / "step_2")
    said = str(e.value)
    assert said.startswith(f"resume=True: checkpoint '{out / 'step_0'}' has no tokenizer ("), said
    m = re.search(r"; to resume, copy ([\w., ]+) from '([^']+)' \(step_2 of this run\) into '([^']+)'$", said)
    assert m, said
    assert m.group(2) == str(out / "step_2") and m.group(3) == str(out / "step_0")
    for f in m.group(1).split(", "):
        shutil.copyfile(f"{m.group(2)}/{f}", f"{m.group(3)}/{f}")
    check_start_tokenizer(ckpts, out / "step_2")
    assert CheckpointFolder.open(out / "step_0").tokenizer_file is not None
    assert {f: (out / "step_0" / f).read_bytes() for f in original} == original
