"""Bad LoRA / S2-Attn settings are refused by the config check (``longshort-validate`` and the recipe, before any
folder is claimed) in one line naming the key and the fix. torchtune's builders took them: rank 0 crashed with a
ZeroDivisionError after the run had claimed its output folder, alpha 0 trained nothing (every adapter scaled by
alpha / r = 0), a target name that is no torchtune module (``o_proj``, ``w1``, a typo) was skipped without a word,
``lora_attn_modules: []`` (which torchtune's builders refuse) ran as q/v, and an S2-Attn group that does not divide
``seq_len`` failed at the first training forward."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from torchtune_longshort.models import hf_decoder
from torchtune_longshort.training.recipe_config import load_recipe_config

REPO = Path(__file__).resolve().parents[1]
DIMS = dict(family="llama", vocab_size=64, num_layers=1, num_heads=4, num_kv_heads=2, embed_dim=32,
            intermediate_dim=64, max_seq_len=64)


def _check(config: str, **over):
    cfg = OmegaConf.load(REPO / "configs" / config)
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return load_recipe_config(cfg, world_size=1, local=False)


BAD = [
    ({"model.lora_rank": 0}, r"^model\.lora_rank=0 is not accepted: expected an integer >= 1"),
    ({"model.lora_rank": -4}, r"^model\.lora_rank=-4 is not accepted"),
    ({"model.lora_alpha": 0}, r"^model\.lora_alpha=0 is not accepted: expected a number > 0"),
    ({"model.lora_alpha": -16}, r"^model\.lora_alpha=-16 is not accepted"),
    ({"model.lora_dropout": 1.0}, r"^model\.lora_dropout=1\.0 is not accepted: expected a number in \[0, 1\)"),
    ({"model.lora_attn_modules": ["q_proj", "o_proj"]}, r"^model\.lora_attn_modules: 'o_proj' is not a module .*"
                                                        r"use 'output_proj'"),
    ({"model.lora_attn_modules": ["w1"]}, r"'w1' is not a module .*use apply_lora_to_mlp=True"),
    ({"model.lora_attn_modules": ["q_prj"]}, r"'q_prj' is not a module .*use 'q_proj'"),
    ({"model.lora_attn_modules": []}, r"^model\.lora_attn_modules=\[\] is not accepted: .*ran as the default"),
    ({"model.lora_attn_modules": "q_proj"}, r"^model\.lora_attn_modules='q_proj' is not accepted: expected a list"),
    ({"model.lora_alpha": None}, r"^model\.lora_rank=8 is set but model\.lora_alpha is not: set lora_alpha"),
    ({"model.lora_rank": None}, r"^model: LoRA settings \[.*'lora_alpha'.*\] given without model\.lora_rank"),
    ({"model.s2_attn": True, "seq_len": 100}, r"^model\.s2_group_size_ratio=0\.25 gives S2-Attn groups of "
                                              r"int\(100 x 0\.25\) = 25 tokens .*set seq_len to 96 or 104"),
    ({"model.s2_attn": True, "model.s2_group_size": 24}, r"^model\.s2_group_size=24 does not divide seq_len=64.*"
                                                         r"multiple of 24 \(48 or 72\)"),
    ({"model.s2_attn": True, "model.s2_group_size": 7}, r"^model\.s2_group_size=7 is not accepted: expected an even"),
    ({"model.s2_attn": True, "model.s2_group_size_ratio": 0}, r"^model\.s2_group_size_ratio=0 is not accepted"),
]


@pytest.mark.parametrize("over, match", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_settings_are_refused_by_the_config_check(over, match):
    with pytest.raises(ValueError, match=match):
        _check("tiny/lora_from_checkpoint.yaml", **over)


def test_nested_node_is_named_and_good_settings_pass():
    """The LongQLoRA config's decoder sits inside rope_scaled: its path is named; its own settings pass."""
    _check("llama2_7b/longqlora_8k_redpajama_book.yaml")
    _check("tiny/lora_from_checkpoint.yaml", **{"model.s2_attn": True})  # 64 tokens: groups of 16
    with pytest.raises(ValueError, match=r"^model\.model\.s2_group_size_ratio=0\.25 .* at seq_len=8190"):
        _check("llama2_7b/longqlora_8k_redpajama_book.yaml", seq_len=8190)
    with pytest.raises(ValueError, match=r"^model\.model\.lora_rank=0 is not accepted"):
        _check("llama2_7b/longqlora_8k_redpajama_book.yaml", **{"model.model.lora_rank": 0})


def test_builder_refuses_too():
    """hf_decoder called directly (a script, the eval side) says the same, not torchtune's ZeroDivisionError."""
    with pytest.raises(ValueError, match=r"^model\.lora_rank=0 is not accepted"):
        hf_decoder(**DIMS, lora_rank=0, lora_alpha=16)


@pytest.mark.parametrize("layout, family", [("gemma", "gemma"), ("qwen2", "qwen2"), ("smollm2", "llama")])
def test_lora_on_a_tied_output_is_refused_for_every_family(family_dirs, layout, family):
    """Gemma's builder dropped apply_lora_to_output=True without a word (the run trained no output adapter); every
    tied family now refuses it alike, naming the key and the fix."""
    with pytest.raises(ValueError, match=rf"^checkpoint '.*{layout}': apply_lora_to_output=True is not accepted for "
                                         rf"this {family} model: .*set apply_lora_to_output=False"):
        hf_decoder(str(family_dirs[layout]), lora_rank=4, lora_alpha=8, apply_lora_to_output=True)
    hf_decoder(str(family_dirs[layout]), lora_rank=4, lora_alpha=8)
    # the config check says it, naming the key's path: longshort-validate said OK, the build refused it once the
    # run's setup had begun
    with pytest.raises(ValueError, match=rf"^model\.apply_lora_to_output=True is not accepted for this {family} model"):
        _check("tiny/lora_from_checkpoint.yaml", checkpoint_dir=str(family_dirs[layout]),
               **{"model.apply_lora_to_output": True})


def test_s2_group_settings_without_s2_attn_are_said_to_be_ignored(caplog):
    """``s2_group_size`` given while ``s2_attn`` is off was ignored without a word (the run trained with full
    attention); one warning names the keys now, and turning S2-Attn off on the LongQLoRA config (its ratio is the
    default) is not warned about nor refused."""
    import logging

    with caplog.at_level(logging.WARNING):
        _check("tiny/lora_from_checkpoint.yaml", **{"model.s2_group_size": 16})
    said = [r.getMessage() for r in caplog.records if "s2_attn is off" in r.getMessage()]
    assert len(said) == 1 and said[0].startswith("model.s2_group_size / s2_group_size_ratio given while model.s2_attn")
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        _check("llama2_7b/longqlora_8k_redpajama_book.yaml", **{"model.model.s2_attn": False})
    assert not [r for r in caplog.records if "s2_attn is off" in r.getMessage()]


@pytest.mark.parametrize("over, named", [
    ({"model.lora_rank": 4, "model.lora_alpha": 8}, r"model\.lora_rank=4"),
    ({"model": {"_component_": "torchtune.models.llama2.lora_llama2_7b", "lora_attn_modules": ["q_proj"]}},
     r"model\._component_='torchtune\.models\.llama2\.lora_llama2_7b'")])
def test_lora_from_random_weights_is_refused_by_the_config_check(over, named):
    """LoRA with ``checkpointer.checkpoint_dir: null`` passed the config check (longshort-validate said OK) and was
    refused when step_0 was written, after the run had trained its tokenizer and claimed its folder, telling the
    user to "merge them first with torchtune.modules.peft.get_merged_lora_ckpt"; the check names the fields now."""
    cfg = OmegaConf.load(REPO / "configs" / "tiny" / "longshort_stdlib.yaml")
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True, merge=False)
    expected = (rf"^{named} with checkpointer\.checkpoint_dir=null: LoRA trains adapters over a pre-trained "
                r".*set checkpointer\.checkpoint_dir .* or drop the model's lora_\* settings")
    with pytest.raises(ValueError, match=expected):
        load_recipe_config(cfg, world_size=1, local=False)
