"""A folder (or link) put where the recipe keeps a step's state file (``recipe_state/step_4.pt/notes.txt``) was
taken for the state by its name: ``overwrite_output_dir=True`` deleted it with the user's files in it (exit 0). It
is refused by name now, the folder as the user left it."""

from __future__ import annotations

import os

import pytest
from run_folders import commit_step, recipe_made, tree


@pytest.mark.parametrize("kind", ["folder", "link"])
def test_a_folder_or_link_named_as_a_recipe_state_is_refused_not_deleted(tmp_path, tiny_llama2_dir, kind):
    from torchtune_longshort.training.output_dir import check_output_dir

    run = recipe_made(tmp_path / "run")
    commit_step(run, 4, tiny_llama2_dir)
    state = run / "recipe_state" / "step_4.pt"
    assert state.is_file()  # the recipe's state, a file, beside its step folder
    state.unlink()
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    if kind == "folder":
        os.rename(mine, state)
    else:
        state.symlink_to(mine, target_is_directory=True)
    left = tree(run)
    with pytest.raises(FileExistsError, match=r"it holds 'recipe_state/step_4.pt \(not a state file\)', which this "
                                              r"recipe did not write"):
        check_output_dir(run, resume=False, overwrite=True)
    assert tree(run) == left and (state / "notes.txt").read_text() == "mine"
