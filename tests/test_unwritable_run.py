"""A run folder whose own entries take no writes (``chattr +i``, a permission, a read-only mount): refused before the
run claims it, and a save that still cannot write ends in one line naming the step that stands.

References: the file system's own answer, stood in for by a probe that refuses the named entry (the tests run as
root, whom permission bits do not stop, and ``chattr`` needs a file system that has it), and the folder's listing
before and after."""

from __future__ import annotations

import os

import pytest
import torch
from run_folders import commit_step, recipe_made, tiny_cfg, tree

from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path, staged_state_path


def _resumable_run(tmp_path, tiny_llama2_dir):
    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    torch.save({"step": 2}, recipe_state_path(run / "step_2"))  # a state without its config: nothing to compare
    (run / "latest").write_text("step_2\n")
    (run / "logs").mkdir()
    return run


@pytest.mark.parametrize("entry,named", [
    ("recipe_state", r"its recipe_state/ does not take writes \(Operation not permitted\), and this run writes each "
                     r"save's optimizer and data state there; make it writable \(chmod u\+w '.*/recipe_state'; "
                     "chattr -i if it is immutable\\), then run again$"),
    ("logs", r"its logs/ does not take writes \(Operation not permitted\).*chmod u\+w '.*/run/logs'"),
    ("latest", r"its latest does not take writes \(Operation not permitted\).*chmod u\+w '.*/run/latest'"),
], ids=["recipe_state", "logs", "latest"])
def test_a_run_entry_that_takes_no_writes_is_refused_before_the_resume_claims_the_folder(
        tmp_path, tiny_llama2_dir, sp_tokenizer_dir, monkeypatch, entry, named):
    """A resume whose recipe_state/ took no file trained its steps, then ended at its first save in a raw
    ``[Errno 1] Operation not permitted: '.../.staging/step_6.pt' -> '.../recipe_state/step_6.pt'``."""
    import torchtune_longshort.config.values as values
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.recipe_config import load_recipe_config

    run = _resumable_run(tmp_path, tiny_llama2_dir)
    cfg = tiny_cfg(run, sp_tokenizer_dir, resume=True)
    load_recipe_config(cfg)  # writable: accepted
    refused = run / entry
    probe_folder, probe_file = values._refuses_new_folder, values._refuses_write
    monkeypatch.setattr(values, "_refuses_new_folder",
                        lambda f: "Operation not permitted" if f == refused else probe_folder(f))
    monkeypatch.setattr(values, "_refuses_write",
                        lambda f: "Operation not permitted" if f == refused else probe_file(f))
    before = tree(run)
    for check in (load_recipe_config, LongShortFinetuneRecipe):  # longshort-validate's check, tune run's constructor
        with pytest.raises(PermissionError, match=rf"^output_dir='.*/run': {named}"):
            check(cfg)
    assert tree(run) == before


def test_the_probes_read_the_file_systems_answer(tmp_path):
    from torchtune_longshort.config.values import refuses_writes

    (tmp_path / "f").write_text("kept")
    assert refuses_writes(tmp_path) is None and refuses_writes(tmp_path / "f") is None
    assert (tmp_path / "f").read_text() == "kept" and sorted(os.listdir(tmp_path)) == ["f"]
    assert refuses_writes(__import__("pathlib").Path("/proc/self")) is not None  # a folder that takes no new one


def test_a_save_whose_state_cannot_be_written_names_the_step_that_stands_and_leaves_no_step_without_state(
        tmp_path, tiny_llama2_dir, monkeypatch):
    import torchtune_longshort.training.checkpointing as checkpointing

    run = recipe_made(tmp_path / "run")
    commit_step(run, 2, tiny_llama2_dir)
    states = run / "recipe_state"
    monkeypatch.setattr(checkpointing, "refuses_writes", lambda p: "Operation not permitted" if p == states else None)
    with pytest.raises(PermissionError) as err:
        commit_step(run, 4, tiny_llama2_dir)
    message = str(err.value)
    assert "\n" not in message and message.startswith("checkpoint step_4 could not be saved ([Errno 1] Operation not "
                                                      f"permitted: '{states}'): make what it names writable")
    assert message.endswith(f"then continue with resume=True (the last saved step, {run / 'step_2'}, stands)")
    assert not (run / "step_4").exists() and not (run / ".staging").exists()  # no step_4 without its state
    assert StepCheckpoints(run).latest(resumable=True) == run / "step_2"


def test_a_save_whose_latest_cannot_be_replaced_says_its_step_stands(tmp_path, tiny_llama2_dir, monkeypatch):
    run = recipe_made(tmp_path / "run")
    replace = os.replace

    def immutable_latest(src, dst):
        if str(dst).endswith("/latest"):
            raise PermissionError(1, "Operation not permitted", str(src), None, str(dst))
        return replace(src, dst)

    monkeypatch.setattr(os, "replace", immutable_latest)
    with pytest.raises(PermissionError, match=r"^checkpoint step_2 could not be saved \(\[Errno 1\] Operation not "
                                              r"permitted: '.*/\.latest\.[0-9a-f]{8}\.tmp' -> '.*/latest'\).*then continue with "
                                              r"resume=True \(the last saved step, .*step_2, stands\)$"):
        commit_step(run, 2, tiny_llama2_dir)
    assert StepCheckpoints(run).latest(resumable=True) == run / "step_2"
    assert not staged_state_path(run / ".staging" / "step_2").exists()


def test_a_run_folder_made_read_only_mid_run_ends_at_the_next_save_in_one_line(
        tmp_path, tiny_llama2_dir, sp_tokenizer_dir, monkeypatch):
    """``chmod 555`` on the run folder between saves (as root's probe cannot, the file system's answer is stood in
    for): the next save's ``mkdir .staging`` was refused, and the lock file's removal then failed too, so the run
    ended in a 60-line traceback naming only ``.lock`` (exit status 1). Now the save ends it in one line naming the
    refused entry and the step that stands, whatever the lock file's removal does."""
    import errno
    import pathlib

    from recipe_config import make_cfg

    import torchtune_longshort.recipes.longshort_finetune as recipe_module
    from torchtune_longshort.config.values import UnwritablePath
    from torchtune_longshort.training import recipe_checkpoints  # the save's own module (training/recipe_saving.py)

    out = tmp_path / "out"
    stage, unlink = recipe_checkpoints.stage_step, pathlib.Path.unlink
    read_only = {"now": False}

    def refused_when_read_only(staged, *args, **kwargs):
        if read_only["now"]:
            raise PermissionError(errno.EACCES, "Permission denied", str(staged.parent))
        read_only["now"] = True  # after the first save, as a chmod between steps
        return stage(staged, *args, **kwargs)

    def lock_kept(path, *args, **kwargs):
        if read_only["now"] and path.name == ".lock":
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return unlink(path, *args, **kwargs)

    monkeypatch.setattr(recipe_checkpoints, "stage_step", refused_when_read_only)
    monkeypatch.setattr(pathlib.Path, "unlink", lock_kept)
    run = recipe_module.LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=2,
                                                         batch_size=2, save_every_n_steps=1))
    run.setup()
    with pytest.raises(UnwritablePath) as err:
        run.train()
    assert str(err.value) == (f"checkpoint step_2 could not be saved ([Errno 13] Permission denied: '{out}/.staging'): "
                              "make what it names writable (chmod u+w; chattr -i if it is immutable), then continue "
                              f"with resume=True (the last saved step, {out}/step_1, stands)")
    assert not (out / "step_2").exists() and (out / "recipe_state" / "step_1.pt").is_file()
