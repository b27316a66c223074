"""What the study says about a run's training: a run whose final step is there (its eval stopped, its result.json
lost) is said to be skipped, and not also said to be training; a run that trains is said to, once. The executor's
own calls (whether ``tune`` ran) are the reference."""

from __future__ import annotations

from pathlib import Path

from torchtune_longshort.study import Study, load_study_config
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
