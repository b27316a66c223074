"""Runs of the tiny recipe resumed in this process: a null seed drawn once, recorded and resumed with; an
interrupted train that gives its folder back; a finished run's resume that builds and writes nothing; a run from
scratch resumed with its step_0 deleted. Split from test_resume_policy.py (what a resume may change)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from run_folders import aged, stat_tree
from test_resume_policy import _tiny_cfg


def _train(cfg):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run = LongShortFinetuneRecipe(cfg)
    run.setup()
    run.train()
    run.cleanup()
    return run


def _losses(out: Path) -> list:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["loss"] for r in rows if "loss" in r]


def test_seed_null_draws_one_seed_that_the_run_records_repeats_and_resumes_with(tmp_path, sp_tokenizer_dir, caplog):
    """torchtune's ``seed: null`` (every config torchtune 0.6.1 ships) was refused. It draws one seed now, printed
    once and recorded wherever the run keeps its config; the references: a run given that integer (the same losses),
    and the same run uninterrupted (a ``seed: null`` resume continues with the recorded seed, bit-exact; another
    integer is refused as any changed seed is). Resumed with ``overwrite_output_dir=True`` as well: resume wins, said
    in one line."""
    import torch

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run, ref = tmp_path / "run", tmp_path / "ref"
    over = {"seed": None, "max_steps": 2, "save_every_n_steps": 1}
    with caplog.at_level("INFO"):
        first = _train(_tiny_cfg(run, sp_tokenizer_dir, stop_after_step=1, **over))
    seed = first.seed
    assert isinstance(seed, int) and first.config.seed == first.config.order_seed == seed
    said = [r.getMessage() for r in caplog.records if "seed: null" in r.getMessage()]
    assert said == [f"seed: null drew seed={seed} (give seed={seed} to repeat this run)"]
    assert OmegaConf.load(run / "torchtune_config.yaml").seed == seed
    assert torch.load(run / "recipe_state" / "step_1.pt", weights_only=False)["config"]["seed"] == seed
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["seed"] == seed
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    with pytest.raises(ValueError, match=rf"seed: {seed} -> {seed + 1}"):  # refused before its setup
        LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, resume=True, **{**over, "seed": seed + 1})).setup()
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before
    caplog.clear()
    with caplog.at_level("INFO"):
        resumed = _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True, overwrite_output_dir=True, **over))
    assert resumed.seed == seed  # resumed: a fresh run (what an overwrite would start) draws another seed
    assert torch.load(run / "recipe_state" / "step_2.pt", weights_only=False)["config"]["seed"] == seed
    said = [r.getMessage() for r in caplog.records if "seed: null" in r.getMessage() or "overwrite" in r.getMessage()]
    assert said == ["resume=True and overwrite_output_dir=True: the run resumes, and overwrite_output_dir deletes "
                    "nothing", f"seed: null: resume=True continues with the run's recorded seed={seed}"]
    _train(_tiny_cfg(ref, sp_tokenizer_dir, **{**over, "seed": seed}))
    assert len(_losses(ref)) == 2 and _losses(run) == _losses(ref)


def test_an_interrupted_train_gives_its_folder_back_so_the_same_process_resumes(tmp_path, sp_tokenizer_dir,
                                                                                monkeypatch):
    """A notebook: Ctrl-C inside ``train()`` kept the output folder's lock, and every later run in that process was
    refused as "in use by another run" naming its own PID (waiting never helps). ``train()`` now gives it back; the
    reference: the same run uninterrupted (the resumed losses equal its). A lock this process still holds says so."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.output_dir import OutputDirLock

    run, ref = tmp_path / "run", tmp_path / "ref"
    over = {"max_steps": 3, "save_every_n_steps": 1}
    first = LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, **over))
    first.setup()
    real_step, steps = first._train_step, []

    def step():
        if len(steps) == 2:
            raise KeyboardInterrupt
        steps.append(1)
        return real_step()

    monkeypatch.setattr(first, "_train_step", step)
    with pytest.raises(KeyboardInterrupt):
        first.train()
    assert not (run / ".lock").exists()
    _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True, **over))
    _train(_tiny_cfg(ref, sp_tokenizer_dir, **over))
    assert len(_losses(ref)) == 3 and _losses(run) == _losses(ref)

    held = OutputDirLock(tmp_path / "held").acquire()
    with pytest.raises(RuntimeError, match=r"is held by this process .*call its cleanup\(\)"):
        OutputDirLock(tmp_path / "held").acquire()
    held.release()


def test_a_resume_of_a_finished_run_builds_and_writes_nothing(tmp_path, sp_tokenizer_dir, tiny_finished_run, caplog,
                                                               capsys):
    """A job scheduler requeues a finished run with resume=True: the recipe built the model, the data and the
    optimizer, started the metric logger (a new, empty log file) and drew a progress bar, to train nothing. Now the
    setup stops at the resume point: nothing is built or written, train() says why, cleanup() names the checkpoint;
    a higher max_steps trains on from there."""
    run = tmp_path / "run"
    shutil.copytree(tiny_finished_run, run, symlinks=True)  # _tiny_cfg(run, sp_tokenizer_dir), trained

    before = aged(run)  # files and folders, their mtimes too (the lock file made and removed moved the folder's)
    with caplog.at_level("INFO"):
        resumed = _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Nothing to train")]
    assert said == [f"Nothing to train: resumed at step 1 ({run / 'step_1'}), and this run ends at step 1: "
                    "max_steps=1 (raise it to train on)"], caplog.text
    assert resumed.finished and getattr(resumed, "_model", None) is None
    assert stat_tree(run) == before  # no log file, no metrics line, no checkpoint touched, no mtime moved
    assert f"[longshort] checkpoint: {run / 'step_1'}" in capsys.readouterr().out
    more = _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True, max_steps=2))
    assert not more.finished and more.global_step == 2 and len(_losses(run)) == 2


def test_a_run_from_scratch_resumes_with_its_step_0_deleted(tmp_path, tiny_llama2_dir):
    """step_0 (the random start of a run from scratch, no resume point) deleted to save disk: resume=True was refused
    as "checkpoint_dir='<run>/step_0' is not a directory", a key the config never set. The resume now reads the
    resumed step alone: its weights, and its config.json as the base of the steps it writes (the reference: that
    file as json reads it; with step_0 there, step_0's, as before). Walked: a tiny run resumed from step_8 writes
    step_10 byte-equal to the same resume beside its step_0."""
    from types import SimpleNamespace

    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
    from torchtune_longshort.training.checkpointing import StepCheckpoints
    from torchtune_longshort.training.model_setup import LoRAInfo
    from torchtune_longshort.training.recipe_checkpoints import start_state_dict

    run = tmp_path / "run"
    shutil.copytree(tiny_llama2_dir, run / "step_2")
    config = SimpleNamespace(checkpointer=SimpleNamespace(checkpoint_dir=None))
    ask = lambda: start_state_dict(config, StepCheckpoints(run), run / "step_2", LoRAInfo(), 0, True, lambda: None)
    state, start, read = ask()
    assert read == start == run / "step_2" and sorted(p.name for p in run.iterdir()) == ["step_2"]
    assert CheckpointFolder.open(read).config == json.loads((run / "step_2" / "config.json").read_text())
    assert state.keys() == CheckpointFolder.open(run / "step_2").tune_state_dict().keys()
    shutil.copytree(tiny_llama2_dir, run / "step_0")  # there: the base is step_0's, as before
    assert ask()[1:] == (run / "step_0", run / "step_0")
    shutil.rmtree(run / "step_0")  # a LoRA run's base is step_0: refused in one line naming it and the fix
    with pytest.raises(ValueError, match=r"^resume=True: .*step_0 \(this run's random start, its LoRA adapters' base\) "
                                         r"is missing: put it back, or train anew: start the run again with "
                                         r"overwrite_output_dir=True$"):
        start_state_dict(config, StepCheckpoints(run), run / "step_2", LoRAInfo(rank=2), 0, True, lambda: None)
    # the recipe's advice (StepCheckpoints.restart) names a user's file there, which the overwrite alone then refused
    from torchtune_longshort.training.overwrite_rules import overwrite_advice
    from torchtune_longshort.training.recipe_checkpoints import check_start_unchanged

    (run / ".longshort_output").write_text("")
    (run / "notes.txt").write_text("mine")
    advised = StepCheckpoints(run, restart=lambda: overwrite_advice(run, ()))
    move = r"move that out of it, then start the run again with overwrite_output_dir=True$"
    with pytest.raises(ValueError, match=r"put it back, or train anew: output_dir also holds 'notes.txt', .*" + move):
        start_state_dict(config, advised, run / "step_2", LoRAInfo(rank=2), 0, True, lambda: None)
    with pytest.raises(ValueError, match=r"back in place, or train anew: output_dir also holds 'notes.txt', .*" + move):
        check_start_unchanged({"start_digest": "another", "step": 2}, run / "step_0", run / "step_2", LoRAInfo(rank=2),
                              advised.restart)
    (run / "notes.txt").unlink()
    (run / ".longshort_output").unlink()
    # a full fine-tune whose steps are RoPE-scaled (linear x2 in step_2's config.json, as transformers reads it): the
    # resumed step's config.json is the scaled one, not the base its steps are written with: refused likewise
    from transformers import AutoConfig

    hf = json.loads((run / "step_2" / "config.json").read_text())
    (run / "step_2" / "config.json").write_text(json.dumps({**hf, "rope_scaling": {"rope_type": "linear",
                                                                                     "factor": 2.0}}))
    assert AutoConfig.from_pretrained(run / "step_2").rope_scaling["factor"] == 2.0
    with pytest.raises(ValueError, match=r"^resume=True: .*step_0 \(this run's random start, the base its RoPE-scaled "
                                         r"steps are written with\) is missing: put it back, or train anew: "
                                         r"start the run again with overwrite_output_dir=True$"):
        ask()
