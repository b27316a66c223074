"""The run's last line, ``[longshort] checkpoint: ...``, names the newest step folder; after a resume that put back a
cut save's ``.staging/old_step_4`` (weights, no recipe state) it named ``step_4`` alone, under "Nothing to train:
resumed at step 2 (.../step_2)", though resume=True continues from step_2. Reference: ``read_recipe_state`` (step_4
has none to read) and ``StepCheckpoints.latest(resumable=True)``."""

from __future__ import annotations

import shutil

import pytest
import torch

from torchtune_longshort.training.checkpointing import StepCheckpoints, read_recipe_state, recipe_state_path
from torchtune_longshort.training.recipe_saving import latest_checkpoint_said


def test_a_newest_step_without_its_recipe_state_is_said_to_be_weights_only(tiny_llama2_dir, tmp_path):
    run = tmp_path / "run"
    for step in (2, 4):
        shutil.copytree(tiny_llama2_dir, run / f"step_{step}")
    recipe_state_path(run / "step_2").parent.mkdir()
    torch.save({"step": 2}, recipe_state_path(run / "step_2"))
    ckpts = StepCheckpoints(run)
    with pytest.raises((OSError, ValueError)):
        read_recipe_state(run / "step_4")
    resumable = ckpts.latest(resumable=True)
    assert resumable == run / "step_2"
    said = latest_checkpoint_said(ckpts)
    assert said == (f"{run / 'step_4'} (weights only: no recipe state; resume=True continues from {resumable})")
    torch.save({"step": 4}, recipe_state_path(run / "step_4"))  # with its state: the folder alone, as before
    assert read_recipe_state(run / "step_4") == {"step": 4} and ckpts.latest(resumable=True) == run / "step_4"
    assert latest_checkpoint_said(ckpts) == str(run / "step_4")
