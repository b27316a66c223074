"""The run's last line, ``[longshort] checkpoint: ...``, names the newest step folder; after a resume that put back a
cut save's ``.staging/old_step_4`` (weights, no recipe state) it named ``step_4`` alone, under "Nothing to train:
resumed at step 2 (.../step_2)", though resume=True continues from step_2. Reference: ``read_recipe_state`` (step_4
has none to read) and ``StepCheckpoints.latest(resumable=True)``."""

from __future__ import annotations

import shutil

import pytest
import torch

from torchtune_longshort.disk_space import size_text
from torchtune_longshort.output_guard import write_names
from torchtune_longshort.training.checkpointing import StepCheckpoints, read_recipe_state, recipe_state_path
from torchtune_longshort.training.out_of_space import stop_message
from torchtune_longshort.training.recipe_saving import latest_checkpoint_said
from torchtune_longshort.training.staging import MANIFEST


def _run(tiny_llama2_dir, run, steps, states):
    """``run`` holding a copy of the tiny checkpoint as each of ``steps``, those of ``states`` with a recipe state."""
    for step in steps:
        shutil.copytree(tiny_llama2_dir, run / f"step_{step}")
    for step in states:
        recipe_state_path(run / f"step_{step}").parent.mkdir(exist_ok=True)
        torch.save({"step": step}, recipe_state_path(run / f"step_{step}"))
    return StepCheckpoints(run)


def test_a_newest_step_without_its_recipe_state_is_said_to_be_weights_only(tiny_llama2_dir, tmp_path):
    run = tmp_path / "run"
    ckpts = _run(tiny_llama2_dir, run, (2, 4), (2,))
    with pytest.raises((OSError, ValueError)):
        read_recipe_state(run / "step_4")
    resumable = ckpts.latest(resumable=True)
    assert resumable == run / "step_2"
    said = latest_checkpoint_said(ckpts)
    assert said == (f"{run / 'step_4'} (weights only: no recipe state; resume=True continues from {resumable})")
    torch.save({"step": 4}, recipe_state_path(run / "step_4"))  # with its state: the folder alone, as before
    assert read_recipe_state(run / "step_4") == {"step": 4} and ckpts.latest(resumable=True) == run / "step_4"
    assert latest_checkpoint_said(ckpts) == str(run / "step_4")


def test_a_users_whole_step_folder_past_max_steps_is_not_named_as_the_runs(tiny_llama2_dir, tmp_path):
    """A resume of an 8-step run beside a user's whole ``step_9/`` (a checkpoint they keep there; the resume leaves it
    untouched) ended naming it: ``checkpoint: .../step_9 (weights only ...)``. Reference: the run's own step_8."""
    run = tmp_path / "run"
    ckpts = _run(tiny_llama2_dir, run, (8, 9), (8,))
    assert ckpts.latest() == run / "step_9"  # a whole folder: a step, as a resume of a longer run reads it
    assert latest_checkpoint_said(ckpts, through=8) == str(run / "step_8")
    assert latest_checkpoint_said(ckpts, through=9).startswith(f"{run / 'step_9'} (weights only")
    torch.save({"step": 9}, recipe_state_path(run / "step_9"))  # resumed from: named whatever max_steps says
    assert latest_checkpoint_said(ckpts, through=8) == str(run / "step_9")


def test_a_full_disk_counts_only_the_runs_own_step_folders_as_room_to_make(tiny_llama2_dir, tmp_path):
    """The full disk's "make room (the N step folders besides step_8 hold ...)" counted a user's whole ``step_9/``
    past max_steps 8 and a ``step_5/`` copied in by hand (neither holds the list the recipe's commit writes), as if
    to delete them. Reference: the bytes of the run's other folder, step_7, and its recipe state, walked here."""
    run = tmp_path / "run"
    for step in (5, 7, 8, 9):
        shutil.copytree(tiny_llama2_dir, run / f"step_{step}")
    for step in (7, 8):  # the run's: listed as its commit lists them, each with its recipe state
        write_names(run / f"step_{step}" / MANIFEST, [p.name for p in (run / f"step_{step}").iterdir()])
    _run(tiny_llama2_dir, run, (), (7, 8))
    write_names(run / "step_9" / MANIFEST, [p.name for p in (run / "step_9").iterdir()])  # copied whole from a run
    own = sum(p.stat().st_size for p in (run / "step_7").rglob("*") if p.is_file())
    own += recipe_state_path(run / "step_7").stat().st_size
    line = stop_message("checkpoint step_8", 8, StepCheckpoints(run), None, False, OSError(28, "No space left"),
                        through=8)
    assert f"make room (the 1 step folder besides step_8 holds {size_text(own)})" in line, line
