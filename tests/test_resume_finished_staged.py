"""A run's last save killed between its step folder's rename and its state's move (``.staging/step_<k>.pt`` beside a
committed ``step_<k>/``, ``latest`` still naming the step before), then resumed at its last step: the resume said
"Nothing to train" and left the staged state, the empty-but-for-it ``.staging/`` and the stale ``latest`` in place
(and, with an older state, ``recipe_state/`` holding that one alone). A finished run's folder holds its last state
alone (``keep_recipe_states: 1``) and no ``.staging/``: the resume now finishes that commit before it exits.

Reference: the same run finished uninterrupted (its folder's entries, its ``latest`` and its state's bytes)."""

from __future__ import annotations

import filecmp
import os
import shutil

from run_folders import tree
from test_resume_policy import _tiny_cfg
from test_resume_runs import _train


def test_a_finished_runs_last_commit_cut_by_a_kill_is_finished_by_its_resume(tmp_path, sp_tokenizer_dir,
                                                                              tiny_finished_run, caplog):
    run = tmp_path / "run"
    shutil.copytree(tiny_finished_run, run, symlinks=True)  # _tiny_cfg(run, sp_tokenizer_dir), one step trained
    (run / ".staging").mkdir()
    os.rename(run / "recipe_state" / "step_1.pt", run / ".staging" / "step_1.pt")  # the kill's moment
    (run / "latest").write_text("step_0\n")  # written after the state's move: the kill left step_0's
    with caplog.at_level("INFO"):
        resumed = _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True))
    assert resumed.finished and any(r.getMessage().startswith("Nothing to train: resumed at step 1")
                                    for r in caplog.records), caplog.text
    assert tree(run) == tree(tiny_finished_run)
    assert (run / "latest").read_text() == (tiny_finished_run / "latest").read_text()
    assert filecmp.cmp(run / "recipe_state" / "step_1.pt", tiny_finished_run / "recipe_state" / "step_1.pt",
                       shallow=False)
