"""A folder named as a save's in ``.staging/`` (``step_<k>/``) that the recipe did not make: a user's note kept in
``.staging/step_3/sub/note.txt`` was deleted without a word by the next ``overwrite_output_dir=True`` run (exit 0),
as any ``step_<k>/`` there was taken for a killed save's. A save now writes the mark ``step_<k>.started`` before it
makes its folder (``training.staging``); a folder without one is refused by name and never cleaned, while what a save
killed at any point leaves is still taken. In a marked folder only what a save writes is the recipe's: a note put into
a killed save's folder (``.staging/step_3/notes.txt``) is refused by name too, where it was deleted with the folder."""

from __future__ import annotations

import re

import pytest
from run_folders import commit_step, recipe_made, stat_tree

from torchtune_longshort.training.checkpointing import StepCheckpoints
from torchtune_longshort.training.output_aside import nothing_written
from torchtune_longshort.training.output_dir import check_output_dir
from torchtune_longshort.training.recipe_checkpoints import discard_scratch_start
from torchtune_longshort.training.staging import MANIFEST, foreign_in, start_staged


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


@pytest.mark.parametrize("folder, mine", [("step_3", "notes.txt"), ("step_3", "sub/x.txt"), ("step_0", "notes.txt")])
def test_a_users_file_in_a_killed_saves_folder_is_refused_by_name_and_never_cleaned(tmp_path, tiny_llama2_dir,
                                                                                      folder, mine):
    """A file put into the marked folder a killed save left (``.staging/step_3/notes.txt``) was deleted with that
    folder by the next overwrite or resume: now both refuse it by name before anything moves, and the folder's
    clean-up leaves it (with what the save wrote); once it is moved out, the killed save's folder goes."""
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    staged = run / ".staging" / folder
    start_staged(staged)  # a save killed while it wrote its weights: its mark, its folder, a torn shard
    (staged / "model-00001-of-00002.safetensors").write_bytes(b"torn")
    (staged / mine).parent.mkdir(parents=True, exist_ok=True)
    (staged / mine).write_text("mine")
    refused_and_kept(run, f"{folder}/{mine}")
    (staged / mine).unlink()
    if "/" in mine:
        (staged / mine).parent.rmdir()
    check_output_dir(run, resume=False, overwrite=True)
    StepCheckpoints(run).clean_staging()
    assert not (run / ".staging").exists() and StepCheckpoints(run).steps() == [2]


def refused_and_kept(run, rel):
    """Overwrite and resume refuse ``.staging/<rel>`` by name, and a save's or a start's clean-up moves nothing."""
    before = stat_tree(run)
    with pytest.raises(FileExistsError, match=rf"it holds '\.staging/{re.escape(rel)}', which this recipe did not "):
        check_output_dir(run, resume=False, overwrite=True)
    with pytest.raises(FileExistsError, match=rf"resume=True would clear \.staging of .*'\.staging/{re.escape(rel)}'"):
        check_output_dir(run, resume=True, overwrite=False)
    StepCheckpoints(run).clean_staging()  # as a save does, and a start
    discard_scratch_start(StepCheckpoints(run))
    assert stat_tree(run) == before


def test_what_a_save_killed_at_any_point_leaves_is_still_the_recipes(tmp_path, tiny_llama2_dir):
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    staging = run / ".staging"
    start_staged(staging / "step_4")  # killed while it wrote its weights
    (staging / "step_4" / "adapter").mkdir()
    (staging / "step_4" / "adapter" / "adapter_model.safetensors").write_bytes(b"torn")
    (staging / "step_4" / f".{MANIFEST}.1a2b3c4d.tmp").write_text("[")  # killed while it wrote its list
    with pytest.raises(FileExistsError):  # a folder there already is never written into
        start_staged(staging / "step_4")
    start_staged(staging / "step_6")
    (staging / "step_6").rmdir()  # killed between its mark and its folder: the mark alone
    start_staged(staging / "step_8")
    (staging / "step_8" / "adapter").mkdir()  # killed before its first adapter file
    (staging / "step_2.started").write_text("")  # killed after step_2's commit renamed it in, before the mark went
    check_output_dir(run, resume=True, overwrite=False)
    check_output_dir(run, resume=False, overwrite=True)
    StepCheckpoints(run).clean_staging()
    assert not staging.exists() and StepCheckpoints(run).steps() == [2]


def test_a_run_stopped_in_its_setup_leaves_a_folder_a_plain_rerun_takes(tmp_path):
    run = recipe_made(tmp_path / "run")
    (run / "metrics.jsonl").unlink()
    start_staged(run / ".staging" / "step_0")  # its start marked, before a weight was written
    assert nothing_written(run)
    (run / ".staging" / "step_0" / "note.txt").write_text("mine")
    assert not nothing_written(run)


@pytest.mark.parametrize("kill", ["after_both_renames", "between_the_renames", "after_its_list_went"])
def test_a_users_file_in_a_step_set_aside_by_a_killed_replace_is_refused_by_name_and_never_cleaned(
        tmp_path, tiny_llama2_dir, kill):
    """A save that replaces step_4 sets the old one aside as ``.staging/old_step_4``; a kill before it is deleted left
    an evaluation written beside its weights there, and the next start deleted it with that folder (exit 0), as all
    of ``old_step_<k>`` was taken for the recipe's. Now its own list (``.longshort_files``) tells: a file it does not
    name is refused by name, nothing moved, and once it is moved out the folder is taken (put back, or deleted)."""
    import shutil

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    step = commit_step(run, 4, tiny_llama2_dir, state=False)  # without its state: a resume from step_2 saves it again
    old = run / ".staging" / "old_step_4"
    shutil.copytree(step, old)  # the folder set aside: the kill's moment, built by hand
    if kill == "between_the_renames":
        shutil.rmtree(step)
    if kill == "after_its_list_went":  # the deletion of what the list names killed once the list was gone
        for q in sorted(old.rglob("*"), reverse=True):
            q.rmdir() if q.is_dir() else q.unlink()
    (old / "eval.json").write_text("mine")
    refused_and_kept(run, "old_step_4/eval.json")
    (old / "eval.json").unlink()
    check_output_dir(run, resume=True, overwrite=False)
    StepCheckpoints(run).clean_staging()
    assert not (run / ".staging").exists() and StepCheckpoints(run).steps() == [2, 4]


def test_a_replace_deletes_what_the_old_steps_list_names_and_keeps_a_users_file(tmp_path, tiny_llama2_dir, capsys):
    """An evaluation written into step_4 while a resumed run was about to save step_4 again went with the old folder
    (``rmtree``); now only what its list names goes, the file stays set aside, and the next start names it."""
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    (commit_step(run, 4, tiny_llama2_dir) / "eval.json").write_text("mine")
    capsys.readouterr()
    commit_step(run, 4, tiny_llama2_dir)
    said = capsys.readouterr().err.splitlines()  # said while the run goes on, not only at the next start
    assert len(said) == 1 and said[0].startswith("step_4 was saved again") and said[0].endswith(
        "kept aside: .staging/old_step_4/eval.json: move it out (overwrite_output_dir and resume refuse this folder "
        "until then)"), said
    old = run / ".staging" / "old_step_4"
    assert sorted(q.relative_to(old).as_posix() for q in old.rglob("*")) == ["eval.json"]
    assert (old / "eval.json").read_text() == "mine" and StepCheckpoints(run).foreign_staged() == [
        ".staging/old_step_4/eval.json"] and StepCheckpoints(run).steps() == [2, 4]


def test_a_link_in_staging_is_a_users(tmp_path):
    """A symbolic link the recipe never makes, named as its own entries are (a state, a marked folder's file, a
    folder's mark), is named, not taken for the recipe's and deleted."""
    staging = tmp_path / ".staging"
    start_staged(staging / "step_3")
    (tmp_path / "mine").write_text("mine")
    (staging / "step_3" / "config.json").symlink_to(tmp_path / "mine")
    (staging / "step_3" / "a.txt").write_text("mine")
    (staging / "step_5.pt").symlink_to(tmp_path / "mine")
    (staging / "step_7").mkdir()
    (staging / "step_7.started").symlink_to(tmp_path / "mine")
    assert [foreign_in(staging / name) for name in ("step_3", "step_5.pt", "step_7")] == [
        ["step_3/a.txt", "step_3/config.json"], ["step_5.pt"], ["step_7"]]
    for name in ("notes.started", "step_5.pt.bak"):  # a user's file named close to a mark or a state: not one
        (staging / name).write_text("mine")
        assert foreign_in(staging / name) == [name]


@pytest.mark.parametrize("escape", ["linked_folder", "dot_dot", "absolute"])
def test_a_replace_deletes_nothing_its_old_steps_list_names_outside_it(tmp_path, tiny_llama2_dir, escape):
    """The list (``.longshort_files``) is a file in the user's folder: a name in it that leads out of the old step
    (through ``adapter/`` the user moved away and linked back, ``..``, an absolute path) deleted the user's file
    there when a resumed run saved that step again; it stays, and the link is named as kept aside."""
    import json
    import shutil

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    step = commit_step(run, 4, tiny_llama2_dir)
    mine = tmp_path / "mine"
    shutil.move(str(step / "adapter"), str(mine))
    if escape == "linked_folder":
        (step / "adapter").symlink_to(mine, target_is_directory=True)
    else:  # its list's names lead out of .staging/old_step_4 (the folder it is read in)
        out = "../../../mine/adapter_config.json" if escape == "dot_dot" else str(mine / "adapter_config.json")
        (step / MANIFEST).write_text(json.dumps(json.loads((step / MANIFEST).read_text()) + [out]))
    commit_step(run, 4, tiny_llama2_dir)
    assert (mine / "adapter_config.json").read_text() == "{}" and StepCheckpoints(run).steps() == [2, 4]
