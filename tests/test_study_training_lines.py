"""What the study says about a run's training: a run whose final step is there (its eval stopped, its result.json
lost) is said to be skipped, and not also said to be training; a run that trains is said to, once; a run whose
train folder holds a user's file is told to move it out and rerun the study. The executor's own calls (whether
``tune`` ran) and the recipe's own overwrite rule are the reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.training.output_aside import MARKER
from torchtune_longshort.training.overwrite_rules import check_deletable
from study_helpers import CPU_SMALL, ROOT, FakeExecutor


def test_a_run_trained_before_is_said_skipped_not_training(tmp_path):
    said, ex = [], FakeExecutor()
    study = Study(load_study_config(CPU_SMALL, quick=True, repo_root=ROOT), output_dir=tmp_path / "out",
                  repo_root=ROOT, executor=ex, log=said.append)
    study.run_one("base", None, evaluate=False)
    run = study.cfg.grid[0]
    del said[:]
    assert study.run_one(run.key, run, evaluate=False)["status"] == "ok"
    tunes = [a for a in ex.calls if Path(a[0]).name == "tune"]
    assert len(tunes) == 2 and said.count(f"[study] {run.key}: training") == 1  # base, then this run
    (study.run_dir(run.key) / "result.json").unlink()  # the study stopped after training: its record not written
    del said[:]
    assert study.run_one(run.key, run, evaluate=False)["status"] == "ok"
    assert len([a for a in ex.calls if Path(a[0]).name == "tune"]) == 2  # not trained again
    assert f"[study] {run.key}: training" not in said, said  # before: 'training', then 'training done before'
    assert [x for x in said if "training done before" in x], said


def test_a_users_file_in_a_runs_train_folder_is_named_to_move_out_and_rerun(tmp_path):
    """A user's notes.txt in runs/<key>/train, no step there: the study passes overwrite_output_dir=True, which the
    recipe refuses for that file, advising another output_dir (which the study, not its user, chooses). The study
    says so itself, before it runs the recipe, and the file stays; moved out, the rerun trains."""
    said, ex = [], FakeExecutor()  # its tune deletes a folder it overwrites, as the recipe does one it may
    study = Study(load_study_config(CPU_SMALL, quick=True, repo_root=ROOT), output_dir=tmp_path / "out",
                  repo_root=ROOT, executor=ex, log=said.append)
    run = study.cfg.grid[0]
    train = study.run_dir(run.key) / "train"
    train.mkdir(parents=True)
    (train / MARKER).write_text("")  # an earlier run's folder, stopped before its first step
    (train / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match="it holds 'notes.txt', which this recipe did not write"):
        check_deletable(train, ())  # the recipe's overwrite refuses it
    rec = study.run_one(run.key, run, evaluate=False)
    assert rec["status"] == "failed" and rec["stage"] == "train", rec
    assert rec["error"] == (f"{train} cannot be trained into (it holds 'notes.txt', which this recipe did not write): "
                            "move what you keep out of it, then run the study again")
    assert (train / "notes.txt").read_text() == "mine" and not [a for a in ex.calls if Path(a[0]).name == "tune"]
    (train / "notes.txt").rename(tmp_path / "notes.txt")  # the advice followed
    assert study.run_one(run.key, run, evaluate=False)["status"] == "ok"
