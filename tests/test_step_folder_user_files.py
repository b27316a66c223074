"""A user's file inside a run's step folders, ``recipe_state/`` or its logs: ``overwrite_output_dir`` and ``resume``
never delete it, and name it (each step folder lists the files the recipe wrote there)."""

from __future__ import annotations

import pytest
from run_folders import commit_step, recipe_made, tiny_cfg, tree


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


@pytest.mark.parametrize("where,named", [
    ("step_4/eval/results.json", "step_4/eval/results.json"), ("recipe_state/notes.txt", "recipe_state/notes.txt"),
    ("step_9/notes.txt", r"step_9/ \(no \.longshort_files\)"), ("logs/notes.txt", r"logs/ \(no \.longshort_files\)"),
    ("recipe_state/step_5.pt", "recipe_state/step_5.pt"),  # a state's name, but no step_5/: not the recipe's
    ("step_4/.longshort_files", r"step_4/ \(no \.longshort_files\)")])  # a list that is not one: nothing listed
def test_overwrite_keeps_a_users_file_inside_a_step_or_state_folder(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                     sp_tokenizer_dir, where, named):
    """An evaluation written into a step folder (``longshort-eval --output_path run/step_4/eval``) or a file put in
    ``recipe_state/`` is not deleted by ``overwrite_output_dir=True``: each step folder lists the files the recipe
    wrote there (only the top-level names were checked, so the whole step folder went). A step folder or the
    metric logger's folder without that list (the recipe writes none without it: a folder made by hand) is named
    whole (it was not looked into, and went)."""
    run = recipe_made(tmp_path / "run")
    commit_step(run, 4, tiny_llama2_dir)
    (run / where).parent.mkdir(parents=True, exist_ok=True)
    (run / where).write_text("mine")
    before = tree(run)
    with pytest.raises(FileExistsError, match=rf"refuses to delete output_dir=.*run'.*it holds '{named}', which this "
                                              "recipe did not write"):
        recipe_cls(tiny_cfg(run, sp_tokenizer_dir, overwrite_output_dir=True)).setup()
    assert tree(run) == before and (run / where).read_text() == "mine"


def test_a_resumed_run_does_not_list_a_users_note_in_the_logs_as_its_own(tmp_path, tiny_llama2_dir):
    """The metric logger's folder lists the files its runs wrote (``.longshort_files``); a note a user put there
    between two runs is not added by the resumed run (it lists what appeared after it claimed the folder), so a
    later overwrite still refuses it by name."""
    import json

    from torchtune_longshort.training.output_dir import check_output_dir, claim_output_dir, record_written

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    logs = run / "logs"
    logs.mkdir()
    (logs / "log_1.txt").write_text("first run")
    record_written(run, ("logs",))
    (logs / "notes.txt").write_text("mine")
    lock = claim_output_dir(run, resume=True, overwrite=False, written_here=("logs",))
    (logs / "log_2.txt").write_text("resumed run")  # what the resumed run's logger opens
    lock.record_written()
    lock.release()
    assert json.loads((logs / ".longshort_files").read_text()) == ["log_1.txt", "log_2.txt"]
    with pytest.raises(FileExistsError, match=r"it holds 'logs/notes.txt', which this recipe did not write"):
        check_output_dir(run, resume=False, overwrite=True, written_here=("logs",))
    assert (logs / "notes.txt").read_text() == "mine"


def test_resume_keeps_a_users_file_in_a_step_folder_it_would_write_again(tmp_path, tiny_llama2_dir):
    """Resumed from step_2 while step_4 exists (its recipe state gone), the run writes step_4 again and deletes the
    old copy: a user's file inside it is refused first, naming it; without one the resume is accepted, and what the
    recipe wrote there (nested files included) is not taken for a user's."""
    from torchtune_longshort.training.output_dir import check_output_dir

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    commit_step(run, 4, tiny_llama2_dir, state=False)
    check_output_dir(run, resume=True, overwrite=False)
    (run / "step_4" / "eval").mkdir()
    (run / "step_4" / "eval" / "results.json").write_text("mine")
    with pytest.raises(FileExistsError, match=r"resume=True would replace step_4 of output_dir=.*which holds "
                                              r"'step_4/eval/results.json' that the recipe did not write"):
        check_output_dir(run, resume=True, overwrite=False)
    (run / "step_2" / "eval.json").write_text("mine")  # step_2 is resumed from, not written again
    (run / "step_4" / "eval" / "results.json").unlink()
    check_output_dir(run, resume=True, overwrite=False)
