"""A folder named as a save's in ``.staging/`` (``step_<k>/``) that the recipe did not make: a user's note kept in
``.staging/step_3/sub/note.txt`` was deleted without a word by the next ``overwrite_output_dir=True`` run (exit 0),
as any ``step_<k>/`` there was taken for a killed save's. A save now writes the mark ``step_<k>.started`` before it
makes its folder (``training.staging``); a folder without one is refused by name and never cleaned, while what a save
killed at any point leaves is still taken."""

from __future__ import annotations

import pytest
from run_folders import commit_step, recipe_made

from torchtune_longshort.training.checkpointing import StepCheckpoints
from torchtune_longshort.training.output_aside import nothing_written
from torchtune_longshort.training.output_dir import check_output_dir
from torchtune_longshort.training.recipe_checkpoints import discard_scratch_start


@pytest.mark.parametrize("folder", ["step_3", "step_0"])
def test_a_users_step_folder_in_staging_is_refused_and_never_cleaned(tmp_path, tiny_llama2_dir, folder):
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    note = run / ".staging" / folder / "sub" / "note.txt"
    note.parent.mkdir(parents=True)
    note.write_text("mine")
    with pytest.raises(FileExistsError, match=rf"it holds '\.staging/{folder}', which this recipe did not write"):
        check_output_dir(run, resume=False, overwrite=True)
    with pytest.raises(FileExistsError, match=rf"resume=True would clear \.staging of .*'\.staging/{folder}'"):
        check_output_dir(run, resume=True, overwrite=False)
    StepCheckpoints(run).clean_staging()  # as a save does, and a start: the user's folder stays
    discard_scratch_start(StepCheckpoints(run))
    assert note.read_text() == "mine"


def test_what_a_save_killed_at_any_point_leaves_is_still_the_recipes(tmp_path, tiny_llama2_dir):
    from torchtune_longshort.training.staging import start_staged

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    staging = run / ".staging"
    start_staged(staging / "step_4")  # killed while it wrote its weights
    (staging / "step_4" / "sub").mkdir()
    (staging / "step_4" / "sub" / "model.safetensors").write_bytes(b"torn")
    start_staged(staging / "step_6")
    (staging / "step_6").rmdir()  # killed between its mark and its folder: the mark alone
    (staging / "step_2.started").write_text("")  # killed after step_2's commit renamed it in, before the mark went
    check_output_dir(run, resume=True, overwrite=False)
    check_output_dir(run, resume=False, overwrite=True)
    StepCheckpoints(run).clean_staging()
    assert not staging.exists() and StepCheckpoints(run).steps() == [2]


def test_a_run_stopped_in_its_setup_leaves_a_folder_a_plain_rerun_takes(tmp_path):
    from torchtune_longshort.training.staging import start_staged

    run = recipe_made(tmp_path / "run")
    (run / "metrics.jsonl").unlink()
    start_staged(run / ".staging" / "step_0")  # its start marked, before a weight was written
    assert nothing_written(run)
    (run / ".staging" / "step_0" / "note.txt").write_text("mine")
    assert not nothing_written(run)
