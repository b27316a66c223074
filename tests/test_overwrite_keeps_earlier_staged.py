"""An earlier run whose last save a kill cut between its step folder's rename and its state's move holds its resume
point in ``.staging/step_<k>.pt`` (:func:`~torchtune_longshort.training.checkpointing.state_file`). A new run from
scratch with ``overwrite_output_dir=True`` whose setup then refuses must leave that run whole (README: "a setup that
refuses leaves the earlier run whole"): its start cleaned all of ``.staging`` before it wrote its own ``step_0`` there,
which finished the earlier run's commit (its ``latest`` rewritten, its older states pruned under the new run's
``keep_recipe_states``), or, before that, deleted the state.

Reference: the earlier run's folder as it was before the refused start (its entries and bytes)."""

from __future__ import annotations

import filecmp
import os
import shutil

import pytest

from run_folders import tree
from test_resume_policy import _tiny_cfg


def test_a_refused_overwrite_start_leaves_the_earlier_runs_staged_state(tmp_path, sp_tokenizer_dir,
                                                                      tiny_finished_run, monkeypatch):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run = tmp_path / "run"
    shutil.copytree(tiny_finished_run, run, symlinks=True)
    (run / ".staging").mkdir()
    os.rename(run / "recipe_state" / "step_1.pt", run / ".staging" / "step_1.pt")  # the kill's moment
    (run / "latest").write_text("step_0\n")
    before = tree(run)

    def refused(self):  # a refusal of the setup after the start's step_0 is staged
        raise ValueError("optimizer refused")

    monkeypatch.setattr(LongShortFinetuneRecipe, "_setup_optimizer", refused)
    recipe = LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, overwrite_output_dir=True))
    with pytest.raises(ValueError, match="optimizer refused"):
        recipe.setup()
    assert tree(run) == before
    assert (run / "latest").read_text() == "step_0\n"
    assert filecmp.cmp(run / ".staging" / "step_1.pt", tiny_finished_run / "recipe_state" / "step_1.pt",
                       shallow=False)


def test_an_overwrite_start_that_passes_its_setup_leaves_no_staged_entry_of_the_earlier_run(tmp_path, sp_tokenizer_dir,
                                                                                             tiny_finished_run):
    """Once the setup has passed, the earlier run is deleted, and what it staged with it (not kept until the first
    save, its room taken meanwhile)."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run = tmp_path / "run"
    shutil.copytree(tiny_finished_run, run, symlinks=True)
    (run / ".staging").mkdir()
    os.rename(run / "recipe_state" / "step_1.pt", run / ".staging" / "step_1.pt")
    recipe = LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, overwrite_output_dir=True))
    recipe.setup()
    try:
        assert not (run / ".staging").exists() and (run / "step_0").is_dir() and not (run / "step_1").exists()
    finally:
        recipe.release_output_dir()
