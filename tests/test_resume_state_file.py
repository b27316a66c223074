"""A recipe state that does not load (cut short by a copy or a full disk, emptied) is refused in one line that names
it, at both places a resume reads it: the config check's first look (``StepCheckpoints.newest_state``, memory-mapped)
and the resume itself (``read_resume_state``). It ended ``resume=True`` in torch's traceback, exit 1.

Reference: ``torch.load`` itself fails on each file (the file really is unreadable), and reads the whole one back."""

from __future__ import annotations

import os
import pickle
import zipfile

import pytest
import torch

from run_folders import commit_step
from torchtune_longshort.refusals import fault_line
from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path
from torchtune_longshort.training.resume import read_resume_state


@pytest.mark.parametrize("keep_bytes", [0, 2, 4, 1000, -100])
def test_a_recipe_state_cut_short_is_refused_in_one_line_naming_it(tmp_path, tiny_llama2_dir, keep_bytes):
    # -100: the state's last 100 bytes cut (the zip's end record with them), as most cuts of a real state: torch
    # says 'OSError: [Errno 22] Invalid argument' (not 'failed finding central directory'), which ended the resume
    # in its traceback
    # 2: 'PK', less than a zip's 4-byte signature (torch reads it as a pickle: 'A load persistent id instruction
    # was encountered, ...'); 4: the signature alone, where torch's line goes on past its first sentence with advice
    run = tmp_path / "run"
    step = commit_step(run, 4, tiny_llama2_dir)
    path = recipe_state_path(step)
    saved = {"step": 4, "optimizer": {"state": {0: {"exp_avg": torch.arange(5000.0)}}, "param_groups": []}}
    torch.save(saved, path)
    assert torch.equal(StepCheckpoints(run).newest_state()["optimizer"]["state"][0]["exp_avg"], torch.arange(5000.0))
    keep_bytes = keep_bytes % path.stat().st_size
    os.truncate(path, keep_bytes)
    assert keep_bytes == 0 or not zipfile.is_zipfile(path)  # the reference: no zip's end record is left
    with pytest.raises((RuntimeError, EOFError, OSError, pickle.UnpicklingError)):  # torch's own reading: no state
        torch.load(path, map_location="cpu", weights_only=False)
    for read in (lambda: StepCheckpoints(run).newest_state(), lambda: read_resume_state(step, {})):
        with pytest.raises(ValueError) as refused:
            read()
        line = fault_line(refused.value)
        assert line is not None and "\n" not in line
        assert f"{path} cannot be read as a recipe state" in line
        assert ("(an empty file: " in line) == (keep_bytes == 0), line  # not torch's 'Ran out of input'
        assert ": a file cut short by a copy or a full disk?)" in line, line
        assert f"checkpoint_dir={str(step)!r}" in line
        if keep_bytes == 4:  # torch's first sentence, not its advice after it
            assert "(RuntimeError: PytorchStreamReader failed reading zip archive: not a ZIP archive; " in line, line
            assert "miniz" not in line, line
    assert path.stat().st_size == keep_bytes and (step / "config.json").is_file()  # nothing removed


@pytest.mark.parametrize("keep_bytes", [2, 100])
def test_a_recipe_state_of_torchs_old_format_cut_short_is_said_cut_short(tmp_path, tiny_llama2_dir, keep_bytes):
    """A state saved in torch's old (pickle) format and cut short: torch's own reading raises EOFError ('Ran out of
    input', 2 bytes) or UnpicklingError ('pickle data was truncated', 100 bytes); the resume's read says it is cut
    short, not 'another file put in its place?'."""
    run = tmp_path / "run"
    step = commit_step(run, 4, tiny_llama2_dir)
    path = recipe_state_path(step)
    torch.save({"step": 4, "exp_avg": torch.arange(5000.0)}, path, _use_new_zipfile_serialization=False)
    os.truncate(path, keep_bytes)
    with pytest.raises((EOFError, RuntimeError, pickle.UnpicklingError)) as torch_error:  # the reference
        torch.load(path, map_location="cpu", weights_only=False)
    with pytest.raises(ValueError) as refused:
        read_resume_state(step, {})
    line = fault_line(refused.value)
    assert line is not None and "\n" not in line, line
    assert (f"{path} cannot be read as a recipe state ({type(torch_error.value).__name__}: "
            f"{str(torch_error.value).split('. ')[0]}: a file cut short by a copy or a full disk?)") in line, line


@pytest.mark.parametrize("other", ["zip", "old_format"])
def test_a_whole_file_that_is_no_recipe_state_is_refused_naming_torchs_error_not_a_cut(tmp_path, tiny_llama2_dir,
                                                                                    other):
    """Another whole file in the state's place (a zip archive of another program's; a state in torch's old format,
    which the config check's memory-mapped read cannot map) was said to be 'a file cut short by a copy or a full
    disk?'; the line now names torch's error, and asks whether another file was put there."""
    run = tmp_path / "run"
    step = commit_step(run, 4, tiny_llama2_dir)
    path = recipe_state_path(step)
    if other == "zip":
        with zipfile.ZipFile(path, "w") as z:
            z.writestr("notes.txt", "not a state")
    else:
        torch.save({"step": 4}, path, _use_new_zipfile_serialization=False)
    assert zipfile.is_zipfile(path) == (other == "zip")  # whole: a zip archive with its end record, or no zip
    with pytest.raises(RuntimeError) as torch_error:  # the reference: torch's own message for this file
        torch.load(path, map_location="cpu", weights_only=False, mmap=True)
    said = {"zip": "file in archive is not in a subdirectory: notes.txt",
            "old_format": "mmap can only be used with files saved with"}[other]
    assert said in str(torch_error.value)
    with pytest.raises(ValueError) as refused:
        StepCheckpoints(run).newest_state()
    line = fault_line(refused.value)
    assert line is not None and "\n" not in line
    assert f"{path} cannot be read as a recipe state (torch.load: RuntimeError: " in line and said in line, line
    assert "cut short" not in line and "another file put in its place?" in line, line


def test_a_resume_whose_step_folder_was_renamed_says_so_not_start_again(tmp_path, tiny_llama2_dir):
    """A run's only step folder renamed (``mv step_2 best``, to keep it) beside its recipe state: resume=True said
    'a run killed before its first save leaves only step_0: start the run again with overwrite_output_dir=True', an
    overwrite that this folder refuses (the state has no folder of the recipe's beside it); it now names the state
    and the folder to put back, and resumes once it is back."""
    from run_folders import recipe_made
    from torchtune_longshort.training.output_dir import check_output_dir

    run = recipe_made(tmp_path / "run")
    step = commit_step(run, 2, tiny_llama2_dir)
    step.rename(run / "best")
    assert recipe_state_path(step).is_file() and not step.exists()
    with pytest.raises(FileNotFoundError) as refused:
        check_output_dir(run, resume=True, overwrite=False)
    line = fault_line(refused.value)
    assert "overwrite_output_dir" not in line
    assert f"recipe_state/step_2.pt is there, but not its folder step_2/: renamed or moved? put it back as " \
           f"{str(step)!r}, then resume" in line
    with pytest.raises(FileExistsError, match="recipe_state/step_2.pt"):  # the overwrite the old advice named
        check_output_dir(run, resume=False, overwrite=True)
    (run / "best").rename(step)
    check_output_dir(run, resume=True, overwrite=False)


def test_a_renamed_newest_step_is_named_when_an_older_step_could_be_resumed(tmp_path, tiny_llama2_dir):
    """keep_recipe_states=2: step_1 and step_2 each with their state, step_2 renamed (``mv step_2 best``). resume=True
    went on from step_1 without a word ('Resumed from .../step_1'), trained step 2 again and replaced the state of
    the folder kept as 'best'; it now names that state and the folder to put back, as with one state."""
    from run_folders import recipe_made
    from torchtune_longshort.training.checkpointing import STAGING
    from torchtune_longshort.training.output_dir import check_output_dir

    run = recipe_made(tmp_path / "run")
    commit_step(run, 1, tiny_llama2_dir)
    step = commit_step(run, 2, tiny_llama2_dir)
    check_output_dir(run, resume=True, overwrite=False)
    step.rename(run / "best")
    assert StepCheckpoints(run).latest(resumable=True) == run / "step_1"  # what the resume went on from
    with pytest.raises(FileNotFoundError) as refused:
        check_output_dir(run, resume=True, overwrite=False)
    line = fault_line(refused.value)
    assert line is not None and "\n" not in line
    assert f"recipe_state/step_2.pt is there, but not its folder step_2/: renamed or moved? put it back as " \
           f"{str(step)!r}, then resume" in line
    (run / STAGING).mkdir()  # a save replacing step_2 killed between its renames: step_2 set aside, no refusal
    (run / "best").rename(run / STAGING / "old_step_2")
    check_output_dir(run, resume=True, overwrite=False)
    (run / STAGING / "old_step_2").rename(step)
    check_output_dir(run, resume=True, overwrite=False)


@pytest.mark.parametrize("denied", ["file", "folder"])
def test_a_recipe_state_this_user_may_not_read_is_refused_naming_the_fix(tmp_path, tiny_llama2_dir, monkeypatch,
                                                                         denied):
    """A state file (chmod 000) or its recipe_state/ folder (chmod 000) this user may not read ended the resume with
    the system's line alone ('[Errno 13] Permission denied: <file>'); the line now names the file and what to do.
    The system's answer for each (PermissionError from the read, or from the stat of a file in a folder without
    search access, as a non-root user gets: the tests may run as root, which reads any file) is put in place."""
    import pathlib

    run = tmp_path / "run"
    step = commit_step(run, 4, tiny_llama2_dir)
    path = recipe_state_path(step)
    torch.save({"step": 4}, path)
    denial = PermissionError(13, "Permission denied", str(path))
    if denied == "file":
        real_load = torch.load
        monkeypatch.setattr(torch, "load", lambda f, *a, **k: (_ for _ in ()).throw(denial) if str(f) == str(path)
                            else real_load(f, *a, **k))
        reads = (lambda: StepCheckpoints(run).newest_state(), lambda: read_resume_state(step, {}))
    else:
        real_is_file = pathlib.Path.is_file
        monkeypatch.setattr(pathlib.Path, "is_file", lambda p: (_ for _ in ()).throw(denial) if p == path
                            else real_is_file(p))
        reads = (lambda: StepCheckpoints(run).newest_state(), lambda: StepCheckpoints(run).latest(resumable=True))
    for read in reads:
        with pytest.raises(ValueError) as refused:
            read()
        line = fault_line(refused.value)
        assert line is not None and "\n" not in line
        assert line.startswith(f"{path} cannot be read by this user (Permission denied): give it read access "
                               f"(chmod u+r {path}) and its folder access (chmod u+rx {path.parent})"), line
    monkeypatch.undo()
    assert torch.load(path, weights_only=False) == {"step": 4}  # nothing touched


def test_a_recipe_state_of_zeros_is_refused_in_one_line_saying_so(tmp_path, tiny_llama2_dir):
    """A state whose bytes are all zeros (its length on disk, its data not, after a crash): the resume's own read
    ended in torch's 'KeyError: filename 'storages' not found', and the config check's memory-mapped one said torch's
    'mmap can only be used with files saved with ...; another file put in its place?'; both now say what the file is."""
    run = tmp_path / "run"
    step = commit_step(run, 4, tiny_llama2_dir)
    path = recipe_state_path(step)
    torch.save({"step": 4, "optimizer": {"state": {0: {"exp_avg": torch.arange(5000.0)}}}}, path)
    size = path.stat().st_size
    path.write_bytes(bytes(size))
    for mmap in (False, True):  # the reference: torch's own reading of the file fails, each way
        with pytest.raises(Exception):
            torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    for read in (lambda: StepCheckpoints(run).newest_state(), lambda: read_resume_state(step, {})):
        with pytest.raises(ValueError) as refused:
            read()
        line = fault_line(refused.value)
        assert line is not None and "\n" not in line, line
        assert f"{path} cannot be read as a recipe state (all its {size} bytes are zeros: " in line, line
        assert f"checkpoint_dir={str(step)!r}" in line and "mmap" not in line
    assert path.read_bytes() == bytes(size)  # nothing changed
