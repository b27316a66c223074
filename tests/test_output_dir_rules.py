"""overwrite_output_dir's deletion rules, checked without a recipe: hand mutants of training/output_dir.py that
test_output_lock and test_reliability_faults let through. A recipe-made folder lying inside an input of the run is
not deleted, a refusal naming more than five foreign entries says there are more, and a user's file at the top of a
folder that is also its log_dir is named once. References: the folder's own tree before and after, and the names
written here."""

from __future__ import annotations

import pytest
from run_folders import commit_step, recipe_made, tree

from torchtune_longshort.training.output_dir import check_output_dir, prepare_output_dir
from torchtune_longshort.training.overwrite_rules import LOCK, overwrite_refusal
from torchtune_longshort.training.written_files import HERE


def _refusal(out, **kwargs) -> str:
    before = tree(out)
    with pytest.raises(FileExistsError, match=r"^overwrite_output_dir=True refuses to delete output_dir=") as e:
        prepare_output_dir(out, resume=False, overwrite=True, **kwargs)
    assert tree(out) == before
    return str(e.value)


@pytest.mark.parametrize("named", [True, False])
def test_a_folder_inside_an_input_of_the_run_is_not_deleted(tmp_path, named):
    base = tmp_path / "base"
    base.mkdir()
    (base / "model.safetensors").write_text("weights")
    run = recipe_made(base / "run")
    check_output_dir(tmp_path / "elsewhere", resume=False, overwrite=True, protect=[base])  # the reference: allowed
    said = _refusal(run, protect=[("checkpoint_dir", base) if named else base])
    what = f"checkpoint_dir={str(base)!r}" if named else str(base)
    assert f"it lies inside {what}, which this run reads" in said, said


def test_more_than_five_foreign_entries_are_said_to_be_more(tmp_path):
    run = recipe_made(tmp_path / "run")
    names = [f"notes{i}.txt" for i in range(7)]
    for name in names:
        (run / name).write_text("mine")
    said = _refusal(run)
    shown = ", ".join(repr(n) for n in sorted(names)[:5])
    assert f"it holds {shown} ..., which this recipe did not write" in said, said


def test_a_user_file_in_a_folder_that_is_its_own_log_dir_is_named_once(tmp_path):
    run = recipe_made(tmp_path / "run")
    (run / "notes.txt").write_text("mine")
    said = _refusal(run, written_here=(HERE,))
    assert said.count("notes.txt") == 1 and "it holds 'notes.txt', which this recipe did not write" in said, said


def test_a_git_work_tree_is_never_deleted_nor_its_git_folder_advised_out(tmp_path):
    from torchtune_longshort.training.overwrite_rules import overwrite_advice

    run = recipe_made(tmp_path / "run")
    (run / ".git").mkdir()
    assert "it is a git work tree" in _refusal(run)
    assert overwrite_advice(run, ()) == ("choose another output_dir (overwrite_output_dir=True would not delete it: it "
                                         "is a git work tree)")
    with pytest.raises(FileExistsError) as plain:  # a plain rerun's ways: no overwrite advised, another folder once
        check_output_dir(run, resume=False, overwrite=False)
    said = str(plain.value)
    assert said.endswith(": choose another output_dir (overwrite_output_dir=True would not delete it: it is a git "
                         "work tree)") and said.count("choose another output_dir") == 1, said


@pytest.mark.parametrize("what", ["cwd", "input"])
def test_the_working_directory_or_an_input_that_is_the_folder_itself_is_kept(tmp_path, monkeypatch, what):
    # output_dir=. from inside an earlier run's folder: only a folder strictly above the working directory was kept
    run = recipe_made(tmp_path / "run")
    if what == "cwd":
        monkeypatch.chdir(run)
        said = _refusal(run)
    else:
        said = _refusal(run, protect=[("checkpoint_dir", run)])
    want = {"cwd": f"it contains the working directory {str(run.resolve())!r}",
            "input": f"it holds checkpoint_dir={str(run.resolve())!r}, which this run reads"}[what]
    assert want in said, said
    assert overwrite_refusal(run, [("checkpoint_dir", run)] if what == "input" else ()) == want  # the study asks it
    if what == "cwd":  # a folder that holds no run (nothing, or a lock alone) is written into, not deleted: no refusal
        empty = tmp_path / "empty"
        empty.mkdir()
        monkeypatch.chdir(empty)
        assert overwrite_refusal(empty) is None
        (empty / LOCK).write_text("")
        assert overwrite_refusal(empty) is None
        check_output_dir(empty, resume=False, overwrite=False)


def test_a_users_file_put_in_after_the_claim_keeps_the_earlier_run(tmp_path):
    # the overwrite's rules are read again when the earlier run is deleted (the setup may take minutes after the claim)
    from torchtune_longshort.training.output_dir import claim_output_dir

    run = recipe_made(tmp_path / "run")
    lock = claim_output_dir(run, resume=False, overwrite=True)
    (run / "notes.txt").write_text("mine")
    before = tree(run)
    with pytest.raises(FileExistsError, match=r"it holds 'notes.txt', which this recipe did not write"):
        lock.clear_earlier_run()
    lock.release()
    assert tree(run) == sorted(set(before) - {".lock"}) and (run / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("saved", [False, True])
def test_a_plain_rerun_refused_names_a_users_file_to_move_out_before_the_overwrite(tmp_path, tiny_llama2_dir, saved):
    # it advised overwrite_output_dir=True alone, which the user's file then refused; the advice is now one the
    # next command takes (the reference: the overwrite's own check, refused before the file moves, taken after)
    run = recipe_made(tmp_path / "run")
    if saved:
        commit_step(run, 1, tiny_llama2_dir)
    (run / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="exists and is not empty") as plain:
        check_output_dir(run, resume=False, overwrite=False)
    said = str(plain.value)
    assert said.endswith("output_dir also holds 'notes.txt', which this recipe did not write: move that out of it, "
                         "then start the run again with overwrite_output_dir=True, or choose another output_dir"), said
    assert ("Pass resume=True to continue that run, or train anew: " in said) == saved, said
    with pytest.raises(FileExistsError, match="it holds 'notes.txt'"):
        check_output_dir(run, resume=False, overwrite=True)
    (run / "notes.txt").rename(tmp_path / "notes.txt")
    check_output_dir(run, resume=False, overwrite=True)
