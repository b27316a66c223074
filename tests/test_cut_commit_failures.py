"""A commit's last writes failing (a full disk, ENOSPC: the failure made by raising it from the writer). Before, the
older recipe states were pruned before ``latest`` was written: a failed write of ``latest`` left it naming a step
whose state was gone (at a save's commit, and where the next clean-up finishes a commit a kill cut). And the save's
out-of-space handler, whose clean-up the full disk stopped too, ended in that clean-up's raw ``OSError`` instead of its
own one line. The reference for "resumable": the file ``recipe_state/<the step latest names>.pt`` is there."""

import errno
import os
from pathlib import Path

import pytest

from torchtune_longshort.training import checkpointing, recipe_saving
from torchtune_longshort.training.checkpointing import LATEST, MANIFEST, StepCheckpoints, recipe_state_path
from torchtune_longshort.training.out_of_space import OutOfSpace


def _full(*args, **kwargs):
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _run_at_step_2(out: Path) -> StepCheckpoints:
    """step_2 committed with its state (``latest`` names it); step_4's folder and state staged, as a save does."""
    ckpts = StepCheckpoints(out)
    for step in (2, 4):
        staged = ckpts.staging_root / f"step_{step}"
        staged.mkdir(parents=True)
        (staged / "config.json").write_text("{}")
        checkpointing.staged_state_path(staged).write_bytes(b"state")
        if step == 2:
            ckpts.commit(staged, step)
    return ckpts


def _latest_state(out: Path) -> Path:
    return recipe_state_path(out / (out / LATEST).read_text().strip())


def test_a_commit_whose_latest_cannot_be_written_keeps_the_state_latest_names(tmp_path, monkeypatch):
    ckpts = _run_at_step_2(tmp_path)
    monkeypatch.setattr(checkpointing, "atomic_write_text", _full)
    with pytest.raises(OSError) as failed:
        ckpts.commit(ckpts.staging_root / "step_4", 4)
    assert failed.value.errno == errno.ENOSPC
    assert _latest_state(tmp_path).is_file()  # before: latest said step_2, its state pruned
    assert ckpts.states() == [recipe_state_path(tmp_path / "step_2"), recipe_state_path(tmp_path / "step_4")]


def test_a_cut_commit_finished_by_the_clean_up_keeps_the_state_latest_names(tmp_path, monkeypatch):
    ckpts = _run_at_step_2(tmp_path)
    os.rename(ckpts.staging_root / "step_4", tmp_path / "step_4")  # the kill: the folder in, not its state
    (tmp_path / "step_4" / MANIFEST).write_text('["config.json"]')
    monkeypatch.setattr(checkpointing, "atomic_write_text", _full)
    with pytest.raises(OSError):
        ckpts.clean_staging()
    assert _latest_state(tmp_path).is_file()  # before: latest said step_2, its state pruned
    assert recipe_state_path(tmp_path / "step_4").read_bytes() == b"state"


class _Saving(recipe_saving.RecipeSaving):
    global_step, _model, _optimizer, _distributed, _is_rank_zero, _device = 4, None, None, False, True, "cpu"
    _checkpoint_bytes, _saved_step, max_steps = None, None, 8

    def _write_checkpoint(self, step, model_sd, opt_sd, rank_rngs=None):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(self.ckpts.staging_root / "step_4"))


def test_a_full_disk_save_whose_clean_up_fails_too_still_ends_in_its_one_line(tmp_path, monkeypatch):
    monkeypatch.setattr(recipe_saving.recipe_checkpoints, "full_state_dicts", lambda *a: ({}, {}))
    monkeypatch.setattr(recipe_saving, "rank_rng_states", lambda distributed: None)
    saving = _Saving()
    saving.ckpts = _run_at_step_2(tmp_path)
    monkeypatch.setattr(saving.ckpts, "clean_staging", _full)
    with pytest.raises(OutOfSpace) as stopped:  # before: the clean-up's OSError, a traceback
        saving.save_checkpoint()
    assert "writing checkpoint step_4 after step 4 (" in str(stopped.value), stopped.value
    assert os.strerror(errno.ENOSPC) in str(stopped.value), stopped.value
