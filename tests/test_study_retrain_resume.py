"""A retrain from step 0 (the run's recipe.yaml changed) stopped after it saved a step is resumed by the rerun from
that step, as the study's interrupted line promises; checkpoints of the earlier recipe.yaml are still never taken.
The recipe's own record, the config saved in each step's recipe state (what ``resume=True`` compares), is the
reference for which config a step was trained under."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf

from torchtune_longshort.output_guard import write_names
from torchtune_longshort.study.runner import Study
from torchtune_longshort.training.checkpointing import MANIFEST
from torchtune_longshort.study.stages import StudyInterrupted
from study_helpers import ROOT, _study


def _changed_then_stopped(tmp_path, saves_under_new_config: bool, moved: bool = False):
    """The study's first fine-tune trained, its lr changed, the retrain stopped by SIGINT after saving step 1 (the
    recipe cleared the old checkpoints first); ``saves_under_new_config`` False: the state found is the old run's.
    ``moved``: the study's folder moved elsewhere before the rerun (its saved config names the old folder)."""
    study, ex = _study(tmp_path)
    study.run_one("base", None, evaluate=False)
    run = study.cfg.grid[0]
    assert study.run_one(run.key, run)["status"] == "ok"
    old_yaml = (study.run_dir(run.key) / "recipe.yaml").read_text()
    ft = study.cfg.finetune
    study.cfg = replace(study.cfg, finetune=replace(ft, overrides={**ft.overrides, "optimizer": {"lr": 5.0e-4}}))

    def retrain_stopped(argv, log_path, *a):
        if Path(argv[0]).name != "tune":
            return ex(argv, log_path, *a)
        ex.calls.append(list(argv))
        config = Path(argv[argv.index("--config") + 1])
        cfg = OmegaConf.merge(OmegaConf.create(config.read_text() if saves_under_new_config else old_yaml),
                              OmegaConf.from_dotlist(argv[argv.index("--config") + 2:]))
        out = Path(cfg.output_dir)
        for p in out.iterdir():  # the recipe's overwrite: the earlier run deleted
            if p.is_dir():
                for q in sorted(p.rglob("*"), reverse=True):
                    q.rmdir() if q.is_dir() else q.unlink()
                p.rmdir()
        (out / "step_1").mkdir()
        (out / "step_1" / "config.json").write_text("{}")
        write_names(out / "step_1" / MANIFEST, {"config.json"})  # committed, as the recipe's step is
        (out / "recipe_state").mkdir()
        torch.save({"step": 1, "config": OmegaConf.to_container(cfg, resolve=True)}, out / "recipe_state/step_1.pt")
        log_path.write_text("SIGINT received: finished step 1, saved step_1; continue with resume=True\n")
        raise StudyInterrupted("tune stopped by SIGINT (exit 130)", 2)  # the recipe's exit after it saved

    study.executor = retrain_stopped
    with pytest.raises(StudyInterrupted):
        study.run_one(run.key, run)
    study.executor = ex
    if moved:
        study.out.rename(tmp_path / "moved")
        study = Study(study.cfg, output_dir=tmp_path / "moved", repo_root=ROOT, executor=ex, log=lambda m: None)
    n = len(ex.calls)
    rec = study.run_one(run.key, run)
    tune = [a for a in ex.calls[n:] if Path(a[0]).name == "tune"]
    return study, run, rec, tune


@pytest.mark.parametrize("moved", [False, True])
def test_a_retrain_stopped_after_it_saved_a_step_resumes_from_it(tmp_path, moved):
    # moved: the study's folder moved before the rerun (before: its saved config's absolute paths differed, and the
    # rerun trained again from step 0)
    study, run, rec, tune = _changed_then_stopped(tmp_path, saves_under_new_config=True, moved=moved)
    assert rec["status"] == "ok" and len(tune) == 1 and tune[0][-1] == "resume=True"  # before: overwrite, step 0
    assert not (study.run_dir(run.key) / ".retrain_from_step_0").exists()  # the retrain ended


def test_a_step_whose_state_records_the_earlier_config_is_not_resumed(tmp_path):
    _, _, rec, tune = _changed_then_stopped(tmp_path, saves_under_new_config=False)
    assert rec["status"] == "ok" and len(tune) == 1 and tune[0][-1] == "overwrite_output_dir=True"
