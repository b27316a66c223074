"""A step folder copied alone into a new folder (mkdir e && cp -a out/a/step_2 e/) and resumed there (output_dir=e
resume=True) was refused 'this recipe did not make that folder: choose another output_dir, without resume=True',
not saying how its weights go on training; the refusal now names the new run they start, checkpoint_dir=<that step>
(the walk's 'tune run ... checkpoint_dir=e/step_2 output_dir=out/fromstep' trained to step_4). The reference: the
folder it names holds the copied step's weights, byte for byte."""

from __future__ import annotations

import filecmp
import re
import shutil
from pathlib import Path

import pytest

from run_folders import tiny_cfg


def test_a_step_folder_copied_alone_is_named_as_the_start_of_a_new_run(tiny_finished_run, sp_tokenizer_dir,
                                                                        tmp_path):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    elsewhere = tmp_path / "e"
    elsewhere.mkdir()
    shutil.copytree(tiny_finished_run / "step_1", elsewhere / "step_1", symlinks=True)
    with pytest.raises(FileNotFoundError, match="this recipe did not make that folder: choose another output_dir, "
                       "without resume=True; to train on from the weights of its step_1, start a new run \\(another "
                       "output_dir\\) with checkpoint_dir=") as refused:
        LongShortFinetuneRecipe(tiny_cfg(elsewhere, sp_tokenizer_dir, max_steps=2, resume=True,
                                         **{"loss.alpha": 0.0})).setup()
    named = Path(re.search(r"with checkpoint_dir='([^']+)'\)$", str(refused.value)).group(1))
    weights = sorted(p.name for p in (tiny_finished_run / "step_1").glob("*.safetensors"))
    assert weights and sorted(p.name for p in named.glob("*.safetensors")) == weights
    assert all(filecmp.cmp(named / w, tiny_finished_run / "step_1" / w, shallow=False) for w in weights)
    assert sorted(p.name for p in elsewhere.iterdir()) == ["step_1"]  # refused before any write
