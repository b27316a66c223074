"""A learned RoPE (CLEX: one ODE module every layer shares) under several processes: refused by the config check,
before anything is written, naming the field; methods without learned parameters are not. (Under FSDP2 the second
layer's ``fully_shard`` found the shared parameters already sharded by the first and failed inside torch; the ODE's
solve also runs in a decoder pre-hook, outside any FSDP unit's forward.)"""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

from torchtune_longshort.config.fields import build_section
from torchtune_longshort.models import load_hf_checkpoint, read_hf_config, rope_scaled, write_hf_checkpoint
from torchtune_longshort.training.recipe_config import load_recipe_config
from torchtune_longshort.training.recipe_config.components import ModelConfig

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


def _cfg(name: str):
    return OmegaConf.load(CONFIGS / name)


@pytest.mark.parametrize("name", ["llama2_7b/clex_4k_pg19.yaml", "llama2_7b/clex_4k_redpajama_book.yaml"])
def test_clex_across_processes_is_refused_naming_the_field(name):
    load_recipe_config(_cfg(name), world_size=1, local=False)  # one process: accepted
    with pytest.raises(ValueError, match=r"^model\.method gives RoPE method 'clex'.*2 processes.*one process"):
        load_recipe_config(_cfg(name), world_size=2, local=False)


def test_a_method_without_learned_parameters_runs_across_processes():
    load_recipe_config(_cfg("llama2_7b/eabf_8k_redpajama_book.yaml"), world_size=8, local=False)


def test_a_folder_whose_own_scaling_is_clex_is_refused_too(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """A CLEX checkpoint (the folder's config.json names the method) fine-tuned further, in several processes."""
    base = load_hf_checkpoint(tiny_llama2_dir)
    L = base.max_seq_len
    model = rope_scaled(base, "clex", 4 * L)
    folder = write_hf_checkpoint(tmp_path / "clex_ckpt", model.state_dict(), read_hf_config(tiny_llama2_dir),
                                 rope_spec=model.rope_scaling, tokenizer=sp_tokenizer_dir)
    node = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(folder)}
    section = build_section(ModelConfig, node, "model")
    assert section.learned_rope(local=True) == ("model.checkpoint_dir", "clex")
    assert section.learned_rope(local=False) is None  # the study's check reads no folder
    plain = build_section(ModelConfig, dict(node, checkpoint_dir=str(tiny_llama2_dir)), "model")
    assert plain.learned_rope(local=True) is None
