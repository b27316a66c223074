"""``resume=True`` on a run killed before its first save: the refusal says what the folder holds. A run from a
checkpoint (it never writes ``step_0``), and one from scratch killed before its setup committed ``step_0`` (it waits
in ``.staging``), were told 'a run killed before its first save leaves only step_0', a folder they do not have.

Reference: the folder itself (``os.path.isdir``), and the overwrite the line advises, which the folder's rules take."""

from __future__ import annotations

import os

import pytest

from run_folders import commit_step, recipe_made
from torchtune_longshort.output_guard import write_names
from torchtune_longshort.refusals import fault_line
from torchtune_longshort.training.output_dir import check_output_dir
from torchtune_longshort.training.written_files import HERE


def _from_checkpoint(run, tiny_llama2_dir):
    """Killed in its first steps: marker, logs, metrics, the config torchtune's logger wrote; no step folder."""
    (run / "logs").mkdir()
    (run / "logs" / ".longshort_files").write_text("[]\n")  # its metric logger's files, listed at its start
    (run / "torchtune_config.yaml").write_text("seed: 0\n")


def _from_scratch_in_setup(run, tiny_llama2_dir):
    """Killed while its setup read its start back from ``.staging/step_0`` (not committed yet)."""
    from torchtune_longshort.training.staging import start_staged

    start_staged(run / ".staging" / "step_0")  # as the recipe makes it: its mark first
    (run / ".staging" / "step_0" / "config.json").write_text("{}")


def _from_scratch_after_setup(run, tiny_llama2_dir):
    """Killed after its setup committed ``step_0`` (no recipe state: not a resume point)."""
    commit_step(run, 0, tiny_llama2_dir, state=False)


def _from_scratch_beside_a_users_step_file(run, tiny_llama2_dir):
    """As above, and a user's file ``step_1`` there: the overwrite the line advised alone was refused for it."""
    _from_scratch_after_setup(run, tiny_llama2_dir)
    (run / "step_1").write_text("mine")


@pytest.mark.parametrize("killed", [_from_checkpoint, _from_scratch_in_setup, _from_scratch_after_setup,
                                    _from_scratch_beside_a_users_step_file])
def test_a_resume_of_a_run_killed_before_its_first_save_names_only_what_is_there(tmp_path, tiny_llama2_dir, killed):
    run = recipe_made(tmp_path / "run")
    killed(run, tiny_llama2_dir)
    with pytest.raises(FileNotFoundError) as refused:
        check_output_dir(run, resume=True, overwrite=False)
    line = fault_line(refused.value)
    assert line is not None and "\n" not in line
    assert "a run killed before its first save leaves" in line, line
    assert ("step_0" in line) == os.path.isdir(run / "step_0"), line
    assert "start the run again with overwrite_output_dir=True" in line, line
    if (run / "step_1").is_file():  # the user's file is named, to be moved out first: the overwrite keeps it
        assert "'step_1 (a file, not a step folder)', which this recipe did not write: move that out of it" in line
        with pytest.raises(FileExistsError, match="step_1"):
            check_output_dir(run, resume=False, overwrite=True, written_here=("logs",))
        (run / "step_1").rename(tmp_path / "step_1")
    # the advice: the folder's rules take that overwrite
    check_output_dir(run, resume=False, overwrite=True, written_here=("logs",))
    data = ("dataset.data_files", run / "train.txt")  # an input of the run inside it: overwrite never deletes it
    with pytest.raises(FileNotFoundError, match=r"choose another output_dir \(overwrite_output_dir=True would not "
                                                r"delete it: it holds dataset\.data_files="):
        check_output_dir(run, resume=True, overwrite=False, protect=[data], written_here=("logs",))
    with pytest.raises(FileExistsError, match=r"it holds dataset\.data_files="):
        check_output_dir(run, resume=False, overwrite=True, protect=[data], written_here=("logs",))
    (run / "log_1.txt").write_text("log")  # log_dir = output_dir: its logger's file, listed, is the run's
    write_names(run / ".longshort_files", ["log_1.txt"])
    with pytest.raises(FileNotFoundError) as refused:
        check_output_dir(run, resume=True, overwrite=False, written_here=(HERE,))
    said = str(refused.value)
    assert "start the run again with overwrite_output_dir=True" in said and "log_1" not in said
    check_output_dir(run, resume=False, overwrite=True, written_here=(HERE,))


@pytest.mark.parametrize("kept", [None, "notes.txt"])
def test_a_run_that_saved_no_step_advises_an_overwrite_the_folder_takes(tmp_path, kept):
    """A run stopped before its first save (a second Ctrl-C, a lost torchrun process) was told to start again with
    overwrite_output_dir=True alone, which a user's file put in its folder meanwhile then refused. Reference: the
    folder's rules (:func:`check_output_dir`) on the overwrite the line advises."""
    from torchtune_longshort.training.checkpointing import StepCheckpoints
    from torchtune_longshort.training.overwrite_rules import overwrite_advice

    run = recipe_made(tmp_path / "run")
    if kept:
        (run / kept).write_text("mine")
    from torchtune_longshort.data.text_files import DataRecordError
    from torchtune_longshort.training import out_of_memory, out_of_space
    from torchtune_longshort.training.bad_record import record_stop
    from torchtune_longshort.training.step_checks import after_non_finite

    ckpts = StepCheckpoints(run, restart=lambda: overwrite_advice(run, ()))
    # every line that advises the overwrite of a run that saved no step: a stop, out of memory (none saved, and the
    # new-run way of a saved one), a full disk, a non-finite first step, an unreadable first record
    for line in (ckpts.standing(), out_of_memory.stop_message("oom", [], ["a shorter seq_len"], 0, None,
                                                              ckpts.restart()),
                 out_of_memory.stop_message("oom", [], ["a shorter seq_len"], 2, "out/step_2", ckpts.restart()),
                 out_of_space.stop_message("metrics.jsonl", 1, ckpts, None, False, OSError(28, "No space left")),
                 after_non_finite(ckpts), str(record_stop(DataRecordError("a.jsonl:2: bad"), None, run,
                                                          ckpts.restart()))):
        assert "start the run again with overwrite_output_dir=True" in line, line
        assert (f"also holds {kept!r}, which this recipe did not write: move that out" in line) == bool(kept), line
    if kept:
        with pytest.raises(FileExistsError, match=kept):
            check_output_dir(run, resume=False, overwrite=True)
        (run / kept).unlink()
    check_output_dir(run, resume=False, overwrite=True)
