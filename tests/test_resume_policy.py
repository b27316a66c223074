"""What a resumed run may change is declared by each field of the typed recipe config (``setting(resume=...)``), and
``training/resume.py`` derives its keys from those declarations: a new field cannot be forgotten.

References: a real run of the tiny recipe resumed in-process with ``window_bos`` flipped (refused in one line that
names it, before any step), and the hand-kept list of must-match keys that the declarations replaced."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from torchtune_longshort.config.fields import RESUME_POLICIES, resume_policies
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.training.resume import RESUME_POLICY, compare_resume_config

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny" / "longshort_stdlib.yaml"
# The hand-kept list that the declarations replaced (training/resume.py:EXACT_KEYS before issue 35): each must still
# be refused on resume.
FORMER_EXACT_KEYS = (
    "model", "tokenizer", "checkpointer", "checkpoint_dir", "dataset", "seq_len", "e_range", "loss", "batch_size",
    "gradient_accumulation_steps", "seed", "data_seed", "position_sampler", "dtype", "lr_scheduler",
)


def _top_level_fields(cls):
    """``(yaml key, field)`` of every key a recipe config holds at its top level (flat sections' keys included)."""
    for f in fields(cls):
        if f.metadata.get("flat"):
            yield from _top_level_fields(f.metadata["section"])
        elif "doc" in f.metadata:
            yield f.metadata.get("key") or f.name, f


def test_every_top_level_field_declares_its_resume_policy():
    undeclared = [k for k, f in _top_level_fields(RecipeConfig) if f.metadata.get("resume") not in RESUME_POLICIES]
    assert undeclared == []
    keys = {k for k, _ in _top_level_fields(RecipeConfig)}
    assert keys <= set(RESUME_POLICY)  # resume.py reads every one of them
    assert RESUME_POLICY["window_bos"] == "exact"
    assert {k for k in FORMER_EXACT_KEYS if RESUME_POLICY[k] != "exact"} == set()
    assert RESUME_POLICY["checkpointer.output_dir"] == "ignored"  # torchtune's ${output_dir}: where, not what


def test_a_field_without_a_policy_is_refused_naming_it():
    from dataclasses import dataclass

    from torchtune_longshort.config.fields import Section, setting

    @dataclass(frozen=True)
    class Forgot(Section):
        kept: int = setting(1, doc="declared", resume="exact")
        new: int = setting(2, doc="a field added without a policy")

    with pytest.raises(TypeError, match=r"^Forgot\.new declares no resume policy: .*resume="):
        resume_policies(Forgot)


def test_compare_refuses_window_bos_applies_max_steps_and_reads_a_left_out_key_as_its_default():
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2}  # window_bos left out: its default, False
    assert compare_resume_config(saved, {**saved, "max_steps": 3}) == [("max_steps", 2, 3)]
    assert compare_resume_config(saved, {**saved, "window_bos": False, "log_every_n_steps": 1}) == []
    with pytest.raises(ValueError, match=r"window_bos: False -> True"):
        compare_resume_config(saved, {**saved, "window_bos": True})


def _tiny_cfg(out, tokenizer_dir, **over):
    cfg = OmegaConf.load(TINY)
    cfg.output_dir = str(out)
    cfg.tokenizer.path = str(tokenizer_dir)
    small = {"max_steps": 1, "seq_len": 64, "batch_size": 2, "validation": None, "loss.alpha": 0.0}
    for k, v in {**small, **over}.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg


def test_a_resume_that_flips_window_bos_is_refused_naming_it(tmp_path, sp_tokenizer_dir):
    """Pre-training with BOS over each window's first token trains other inputs than without: a resume that flips
    it would silently train another run (the hand-kept list lacked it, and the flip was applied)."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run = tmp_path / "run"
    first = LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir))
    first.setup()
    first.train()
    first.cleanup()
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    resumed = LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, resume=True, window_bos=True))
    with pytest.raises(ValueError) as err:
        resumed.setup()
    resumed.release_output_dir()
    message = str(err.value)
    assert "\n" not in message
    assert "window_bos: False -> True" in message and "changes what the run trains" in message
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before  # nothing written, nothing removed
