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
    # a list that is not one: nothing listed, and it is said so ("no .longshort_files" sent one looking for it)
    ("step_4/.longshort_files", r"step_4/ \(its \.longshort_files is no JSON list of names\)"),
    # a folder named as a killed atomic write's file (the recipe's .tmp entries are files): it went, whole
    ("step_9.tmp/my_eval/results.json", "step_9.tmp"), ("latest.tmp/notes.txt", "latest.tmp")])
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

    from torchtune_longshort.training.output_dir import check_output_dir, claim_output_dir
    from torchtune_longshort.training.written_files import record_written

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
    from torchtune_longshort.training.output_dir import check_output_dir, claim_output_dir

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
    # a user's step_9/ past the run's max_steps: never written by it (it was refused as one it would replace)
    (run / "step_9").mkdir()
    (run / "step_9" / "notes.txt").write_text("mine")
    check_output_dir(run, resume=True, overwrite=False, max_steps=8)  # its last step is the one before step_9
    claim_output_dir(run, resume=True, overwrite=False, max_steps=8).release()  # as the recipe claims it
    assert (run / "step_9" / "notes.txt").read_text() == "mine"
    with pytest.raises(FileExistsError, match=r"resume=True would replace step_9 .*'step_9/ \(no \.longshort_files"):
        check_output_dir(run, resume=True, overwrite=False, max_steps=9)


@pytest.mark.parametrize("where", ["step_4/my_evals", "logs/shared_tb"])
def test_a_users_link_to_a_folder_inside_a_step_or_log_folder_is_named(tmp_path, tiny_llama2_dir, where):
    """A user's symbolic link to a folder of theirs, put in a step folder or the metric logger's folder: overwrite
    and a resume that writes that step again refuse it by name. It was taken for a folder (rglob does not go into a
    link) and so for nothing of the user's, and the overwrite deleted it without a word (a link to a file was
    refused)."""
    from torchtune_longshort.training.output_dir import check_output_dir
    from torchtune_longshort.training.written_files import record_written

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    commit_step(run, 4, tiny_llama2_dir, state=False)
    (run / "logs").mkdir()
    (run / "logs" / "log_1.txt").write_text("log")
    record_written(run, ("logs",))
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("mine")
    # a link to a folder inside the same folder deletes nothing else with it (wandb's logs/wandb/latest-run): the run's
    (run / where).parent.joinpath("own").mkdir()
    (run / where).parent.joinpath("latest-run").symlink_to("own", target_is_directory=True)
    record_written(run, ("logs",))
    check_output_dir(run, resume=False, overwrite=True, written_here=("logs",))
    (run / where).symlink_to(mine, target_is_directory=True)
    with pytest.raises(FileExistsError, match=rf"it holds '{where}', which this recipe did not write"):
        check_output_dir(run, resume=False, overwrite=True, written_here=("logs",))
    if where.startswith("step_4"):
        with pytest.raises(FileExistsError, match=rf"resume=True would replace step_4 .*holds '{where}'"):
            check_output_dir(run, resume=True, overwrite=False)
    assert (run / where).is_symlink() and (mine / "notes.txt").read_text() == "mine"


class FailingLogger:
    """A metric logger that cannot start (wandb without a login, mlflow without its server): it makes its folder
    and a file there first, as wandb does, then raises."""

    def __init__(self, log_dir: str, **kwargs):
        from pathlib import Path

        Path(log_dir).mkdir(parents=True, exist_ok=True)
        (Path(log_dir) / "debug.log").write_text("started")
        raise RuntimeError("FailingLogger: no login")


@pytest.mark.parametrize("scratch", [True, False], ids=["from_scratch", "from_checkpoint"])
def test_a_metric_logger_that_fails_to_start_leaves_the_earlier_run_whole(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                         sp_tokenizer_dir, scratch):
    """The metric logger was built after ``overwrite_output_dir=True`` had deleted the earlier run: a logger that
    cannot start (wandb without a login) refused the new run with the earlier one gone. It is built first now,
    before the earlier run is cleared; what it wrote is listed as the recipe's, so the mended rerun replaces all."""
    from recipe_config import make_cfg

    run = recipe_made(tmp_path / "run")
    commit_step(run, 4, tiny_llama2_dir)
    before = tree(run)
    failing = {"_component_": f"{__name__}.FailingLogger", "log_dir": str(run / "logs")}
    cfg = (tiny_cfg if scratch else lambda out, tok, **o: make_cfg(tiny_llama2_dir, tok, out, max_steps=1, **o))
    with pytest.raises(RuntimeError, match="FailingLogger: no login"):
        recipe_cls(cfg(run, sp_tokenizer_dir, overwrite_output_dir=True, metric_logger=failing)).setup()
    assert [p for p in tree(run) if not p.startswith("logs")] == before and (run / "step_4" / "config.json").is_file()
    r = recipe_cls(cfg(run, sp_tokenizer_dir, overwrite_output_dir=True))  # DiskLogger into logs/
    r.setup()
    r.release_output_dir()
    logs = sorted(p.name for p in (run / "logs").iterdir())
    assert not (run / "step_4").exists() and [n for n in logs if n != ".longshort_files"] != []
    assert "debug.log" not in logs and all(n.startswith(("log_", ".longshort_files")) for n in logs), logs


def test_a_users_file_in_staging_is_refused_by_resume_and_overwrite_and_never_cleaned(tmp_path, tiny_llama2_dir):
    """``.staging/`` holds what a killed save left (a step folder being written, its state, a step set aside): a
    resume or a save discards it. A user's file there went with it, without a word (``shutil.rmtree`` of the
    folder); now resume and overwrite refuse it by name, and cleaning leaves it."""
    from torchtune_longshort.training.checkpointing import StepCheckpoints
    from torchtune_longshort.training.output_dir import check_output_dir
    from torchtune_longshort.training.staging import start_staged

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    staging = run / ".staging"
    start_staged(staging / "step_4")  # as the recipe's save makes it: its mark first
    (staging / "step_4" / "model-00001-of-00001.safetensors").write_bytes(b"torn")
    (staging / "step_4.pt.tmp").write_bytes(b"torn")
    (staging / "old_step_2").mkdir()
    check_output_dir(run, resume=True, overwrite=False)  # a killed save's leftovers are the recipe's
    check_output_dir(run, resume=False, overwrite=True)
    (staging / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"resume=True would clear \.staging of output_dir=.*which holds "
                                              r"'\.staging/notes\.txt' that the recipe did not write"):
        check_output_dir(run, resume=True, overwrite=False)
    with pytest.raises(FileExistsError, match=r"it holds '\.staging/notes\.txt', which this recipe did not write"):
        check_output_dir(run, resume=False, overwrite=True)
    StepCheckpoints(run).clean_staging()  # as a save does mid-run: the recipe's entries go, the user's stays
    assert sorted(p.name for p in staging.iterdir()) == ["notes.txt"] and (staging / "notes.txt").read_text() == "mine"
    (staging / "notes.txt").unlink()
    StepCheckpoints(run).clean_staging()
    assert not staging.exists()


@pytest.mark.parametrize("kind", ["file", "link", "link_to_runs"])
def test_a_users_file_or_link_named_like_a_step_folder_is_refused_not_deleted(tmp_path, tiny_llama2_dir, kind):
    """A plain file named ``step_4`` beside the run's step folders, or a link ``step_4`` to a step folder moved to
    another disk: overwrite deleted it without a word (only folders were looked into), and a resume that saves
    step 4 moved it into ``.staging/old_step_4`` and ended in '[Errno 20] Not a directory' (the link: rmtree of a
    link). Both are now refused by name, and stay as they were. A link to a folder of other runs (``ln -s /tmp
    step_4``; ``/`` alike, its whole tree walked) was followed by the overwrite's search for nested runs, which named
    'step_4/a_run, the output folder of another run' in the link's place."""
    from torchtune_longshort.training.output_dir import check_output_dir, prepare_output_dir

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    if kind == "file":
        (run / "step_4").write_text("mine")
        named = r"step_4 \(a file, not a step folder\)"
    elif kind == "link":  # a whole step folder of the recipe's, list included, kept elsewhere
        moved = commit_step(recipe_made(tmp_path / "other"), 4, tiny_llama2_dir, state=False)
        (run / "step_4").symlink_to(moved, target_is_directory=True)
        named = r"step_4 \(a symbolic link\)"
    else:  # a folder holding another run's output folder
        recipe_made(tmp_path / "other" / "a_run")
        (run / "step_4").symlink_to(tmp_path / "other", target_is_directory=True)
        named = r"step_4 \(a symbolic link\)"
    before, kept = tree(run), tree(tmp_path / "other") if kind != "file" else None
    with pytest.raises(FileExistsError, match=rf"resume=True would replace step_4 of output_dir=.*holds '{named}'"):
        check_output_dir(run, resume=True, overwrite=False)
    with pytest.raises(FileExistsError, match=rf"it holds '{named}', which this recipe did not write"):
        prepare_output_dir(run, resume=False, overwrite=True)
    assert tree(run) == before and (run / "step_4").is_symlink() == (kind != "file")
    assert (run / "step_4").read_text() == "mine" if kind == "file" else tree(tmp_path / "other") == kept


def test_a_run_inside_a_step_folder_is_named_as_another_runs_output(tmp_path, tiny_llama2_dir):
    """The search for nested runs still looks into the run's own folders (a run whose output_dir was a step folder's
    subfolder): only a link at the top is left unfollowed."""
    from torchtune_longshort.training.output_dir import prepare_output_dir

    run = recipe_made(tmp_path / "run")
    recipe_made(commit_step(run, 2, tiny_llama2_dir) / "evals" / "a_run")
    before = tree(run)
    with pytest.raises(FileExistsError, match=r"it holds 'step_2/evals/a_run', the output folder of another run"):
        prepare_output_dir(run, resume=False, overwrite=True)
    assert tree(run) == before


@pytest.mark.parametrize("name", ["latest", "torchtune_config.yaml"])
def test_a_users_folder_named_as_a_file_the_recipe_writes_is_refused_not_deleted(tmp_path, tiny_llama2_dir, name):
    """A folder of the user's named ``latest`` (or as another file the recipe writes at the top of its folder):
    overwrite deleted it with what it held, without a word, and a resume trained a step, then ended in
    '[Errno 21] Is a directory: .../latest.tmp -> .../latest'. Both now refuse it by name, touching nothing."""
    from torchtune_longshort.training.output_dir import check_output_dir, prepare_output_dir

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    (run / name).unlink(missing_ok=True)
    (run / name).mkdir()
    (run / name / "notes.txt").write_text("mine")
    before = tree(run)
    with pytest.raises(FileExistsError, match=rf"resume=True would write {name} of output_dir=.*a folder or link"):
        check_output_dir(run, resume=True, overwrite=False)
    with pytest.raises(FileExistsError, match=rf"it holds '{name}', which this recipe did not write"):
        prepare_output_dir(run, resume=False, overwrite=True)
    assert tree(run) == before and (run / name / "notes.txt").read_text() == "mine"


@pytest.mark.parametrize("kind", ["file", "link"])
def test_a_users_recipe_state_that_is_no_folder_is_refused_by_overwrite(tmp_path, tiny_llama2_dir, kind):
    """A file of the user's named ``recipe_state`` (or a link of that name to a folder of states kept elsewhere):
    overwrite deleted it without a word. It is now named, and stays."""
    from torchtune_longshort.training.output_dir import prepare_output_dir

    run, kept = recipe_made(tmp_path / "run"), tmp_path / "kept"
    commit_step(run, 2, tiny_llama2_dir)
    (run / "recipe_state").rename(kept)
    (run / "recipe_state").write_text("mine") if kind == "file" else (run / "recipe_state").symlink_to(kept)
    before = tree(run)
    with pytest.raises(FileExistsError, match=r"it holds 'recipe_state', which this recipe did not write"):
        prepare_output_dir(run, resume=False, overwrite=True)
    assert tree(run) == before and (run / "recipe_state").is_symlink() == (kind == "link")
    assert sorted(p.name for p in kept.iterdir()) == ["step_2.pt"]
