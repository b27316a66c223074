"""A save SIGKILLed between its step folder's commit and its recipe state's move into ``recipe_state/`` (the two
renames of ``StepCheckpoints.commit``). Before: ``resume=True`` refused the run ('step_4 is whole, but not its
optimizer and data state recipe_state/step_4.pt: to train on from its weights, start a new run with
checkpoint_dir=...'), or went back to an older step, while that state lay complete in ``.staging/step_4.pt``. Now
step_4 is the resume point, its state read where the kill left it, and the next save's clean-up moves it in."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import torch

from torchtune_longshort.training.staging import start_staged


class Killed(BaseException):
    """Stands for a SIGKILL at that instant: no ``except Exception`` and no clean-up of the recipe's runs."""


def _commit_killed_at(ckpts, staged, step, monkeypatch, name, hits):
    """Commit ``staged`` as ``step`` with ``os.<name>`` dying (:class:`Killed`) at the call where ``hits(src, dst)``:
    the folder as that kill leaves it."""
    real = getattr(os, name)

    def killed(src, dst):
        if hits(Path(src), Path(dst)):
            raise Killed
        return real(src, dst)

    monkeypatch.setattr(os, name, killed)
    with pytest.raises(Killed):
        ckpts.commit(staged, step)
    monkeypatch.setattr(os, name, real)


def test_a_save_killed_before_its_state_moved_in_resumes_from_that_step(tmp_path, sp_tokenizer_dir, monkeypatch):
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune_longshort.models.hf_model import decoder_config, hf_decoder
    from torchtune_longshort.training.checkpointing import (
        StepCheckpoints, read_recipe_state, recipe_state_path, staged_state_path,
    )
    from torchtune_longshort.training.durable_save import atomic_torch_save

    node = dict(family="llama", vocab_size=512, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                max_seq_len=128)
    write_hf_checkpoint(tmp_path / "ckpt", hf_decoder(**node).state_dict(), decoder_config(node),
                        tokenizer=sp_tokenizer_dir)
    out = tmp_path / "run"
    ckpts = StepCheckpoints(out)
    staged = ckpts.staging_root / "step_2"
    start_staged(staged)
    shutil.copytree(tmp_path / "ckpt", staged, dirs_exist_ok=True)
    atomic_torch_save({"step": 2}, staged_state_path(staged))
    ckpts.commit(staged, 2)
    staged = ckpts.staging_root / "step_4"
    start_staged(staged)
    shutil.copytree(tmp_path / "ckpt", staged, dirs_exist_ok=True)
    atomic_torch_save({"step": 4, "marker": "four"}, staged_state_path(staged))
    # the state's move into recipe_state/: the run dies first
    _commit_killed_at(ckpts, staged, 4, monkeypatch, "replace", lambda src, dst: dst.parent.name == "recipe_state")
    assert (out / "step_4").is_dir() and not recipe_state_path(out / "step_4").exists()  # the kill's moment
    left = out / ".staging" / "step_4.pt"
    assert torch.load(left, weights_only=False) == {"step": 4, "marker": "four"}

    assert ckpts.latest(resumable=True) == out / "step_4"  # before: step_2
    assert read_recipe_state(out / "step_4") == torch.load(left, weights_only=False)
    ckpts.clean_staging()  # as the resumed run's first save does
    assert torch.load(recipe_state_path(out / "step_4"), weights_only=False) == {"step": 4, "marker": "four"}
    assert not (out / ".staging").exists() and sorted(p.name for p in (out / "recipe_state").iterdir()) == [
        "step_4.pt"]  # keep_recipe_states=1: step_2's state pruned, as the commit would have


def _whole_step(tmp_path, sp_tokenizer_dir):
    """A checkpoint folder (tiny Llama, its tokenizer) to stage, written once per test."""
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune_longshort.models.hf_model import decoder_config, hf_decoder

    node = dict(family="llama", vocab_size=512, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                max_seq_len=128)
    write_hf_checkpoint(tmp_path / "ckpt", hf_decoder(**node).state_dict(), decoder_config(node),
                        tokenizer=sp_tokenizer_dir)
    return tmp_path / "ckpt"


def _contents(folder: Path) -> dict:
    return {q.relative_to(folder).as_posix(): q.read_bytes() for q in sorted(folder.rglob("*")) if q.is_file()}


def test_a_save_killed_between_the_renames_of_a_step_it_replaces_keeps_that_step(tmp_path, sp_tokenizer_dir,
                                                                                  monkeypatch):
    """A run resumed from step_2 saves step_4 again (its folder there, without its state); the commit renames the old
    step_4 to ``.staging/old_step_4``, and a SIGKILL lands before the new one is renamed in. Before, the resumed run's
    first save (``clean_staging``) deleted ``old_step_4``, the folder's only copy in place, and the staged new one:
    no step_4 at all. Now the old folder is put back, byte for byte as it was, and the check of a step folder
    (``check_checkpoint_folder``, the reference) takes it."""
    from torchtune_longshort.models.hf_checkpoint import check_checkpoint_folder
    from torchtune_longshort.training.checkpointing import StepCheckpoints, staged_state_path
    from torchtune_longshort.training.durable_save import atomic_torch_save

    ckpt = _whole_step(tmp_path, sp_tokenizer_dir)
    out = tmp_path / "run"
    ckpts = StepCheckpoints(out)
    for step in (2, 4):  # step_4 committed without its state (as if it was deleted): a resume starts at step_2
        staged = ckpts.staging_root / f"step_{step}"
        start_staged(staged)
        shutil.copytree(ckpt, staged, dirs_exist_ok=True)
        if step == 2:
            atomic_torch_save({"step": 2}, staged_state_path(staged))
        ckpts.commit(staged, step)
    before = _contents(out / "step_4")
    staged = ckpts.staging_root / "step_4"
    start_staged(staged)
    shutil.copytree(ckpt, staged, dirs_exist_ok=True)
    atomic_torch_save({"step": 4}, staged_state_path(staged))
    # the new step_4's rename into place: the run dies first
    _commit_killed_at(ckpts, staged, 4, monkeypatch, "rename", lambda src, dst: src == staged)
    assert not (out / "step_4").exists() and (out / ".staging" / "old_step_4").is_dir()  # the kill's moment

    assert ckpts.latest(resumable=True) == out / "step_2"
    ckpts.clean_staging()  # as the resumed run's first save does
    assert _contents(out / "step_4") == before  # before: step_4 gone, old and new
    check_checkpoint_folder(out / "step_4")
    assert ckpts.steps() == [2, 4] and not (out / ".staging").exists()
    assert ckpts.steps(resumable=True) == [2]  # the killed save's state is not moved in beside the old weights


@pytest.mark.parametrize("keep, names, left", [
    (1, ["step_9.pt", "step_10.pt"], ["step_10.pt"]),  # by step number: step_10 is the newer
    (3, ["step_1.pt", "step_2.pt"], ["step_1.pt", "step_2.pt"]),  # fewer than keep: none goes
])
def test_the_states_kept_are_the_newest_by_step_number_and_an_incomplete_folder_is_no_step(tmp_path, keep, names,
                                                                                          left):
    """``StepCheckpoints``' pruning and step list on a hand-built folder (no model): hand mutants that sorted the
    states as text (deleting step_10's, the newest), sliced past the start with keep above their number (deleting
    one kept), or counted a step folder without its files as a step, survived the run-level tests."""
    import os

    from torchtune_longshort.training.checkpointing import RECIPE_STATE_DIR, StepCheckpoints

    (tmp_path / RECIPE_STATE_DIR).mkdir()
    for name in names:
        (tmp_path / RECIPE_STATE_DIR / name).write_bytes(b"state")
    (tmp_path / "step_3").mkdir()  # a folder of that name without a checkpoint's files
    ckpts = StepCheckpoints(tmp_path, keep=keep)
    ckpts._prune_states()
    assert sorted(os.listdir(tmp_path / RECIPE_STATE_DIR)) == sorted(left)
    assert ckpts.steps() == [] and ckpts.latest() is None
