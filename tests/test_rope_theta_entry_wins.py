"""A config.json with a top-level ``rope_theta`` and a RoPE entry (``rope_scaling`` / ``rope_parameters``) holding
another: transformers 5 runs the entry's (``convert_rope_params_to_dict`` sets the top-level one as a default only).
Our base is checked against the inverse frequencies transformers' own rotary embedding module computes."""

from __future__ import annotations

import pytest
import torch

from torchtune_longshort.models.family_builders import rope_theta, with_rope_theta
from torchtune_longshort.models.families import MODEL_FAMILIES
from torchtune_longshort.models.hf_rope import rope_spec_from_hf_config
from torchtune_longshort.rope import build_rope

TOP, INSIDE = 10_000.0, 50_000.0
DIMS = dict(model_type="llama", architectures=["LlamaForCausalLM"], vocab_size=32, hidden_size=64,
            intermediate_size=128, num_hidden_layers=1, num_attention_heads=4, num_key_value_heads=2,
            max_position_embeddings=128, rms_norm_eps=1e-5, rope_theta=TOP)


def transformers_inv_freq(config):
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    return LlamaRotaryEmbedding(LlamaConfig.from_dict(dict(config))).inv_freq


@pytest.mark.parametrize("key", ["rope_scaling", "rope_parameters"])
def test_a_scaled_entry_s_own_base_is_the_one_transformers_runs(key):
    config = {**DIMS, key: {"rope_type": "linear", "factor": 2.0, "rope_theta": INSIDE}}
    spec = rope_spec_from_hf_config(config)
    ours = build_rope(spec["method"], head_dim=16, max_seq_len=spec["max_seq_len"], base=spec["base"],
                      factor=spec["factor"]).theta
    ref = transformers_inv_freq(config)
    torch.testing.assert_close(ours, ref)
    # the comparison tells the two bases apart: the top-level one gives other frequencies
    other = build_rope("linear", head_dim=16, max_seq_len=128, base=TOP, factor=2.0).theta
    assert not torch.allclose(other, ref)


def test_a_default_entry_s_own_base_is_the_one_the_built_model_runs():
    """Plain RoPE (``rope_type: default``) with the base inside ``rope_parameters``: no scaling spec, so the
    family's builder takes the base; before, it took the top-level 10000 while transformers ran 50000."""
    config = {**DIMS, "rope_parameters": {"rope_type": "default", "rope_theta": INSIDE}}
    assert rope_spec_from_hf_config(config) is None
    model = MODEL_FAMILIES["llama"].decoder(config, 128, None)
    torch.testing.assert_close(model.layers[0].attn.pos_embeddings.theta, transformers_inv_freq(config))


def test_with_rope_theta_sets_the_base_where_it_is_read():
    config = {**DIMS, "rope_parameters": {"rope_type": "default", "rope_theta": INSIDE}}
    changed = with_rope_theta(config, 20_000.0)
    assert rope_theta(changed) == 20_000.0
    torch.testing.assert_close(transformers_inv_freq(changed), 1.0 / 20_000.0 ** (torch.arange(0, 16, 2) / 16.0))
    assert config["rope_parameters"]["rope_theta"] == INSIDE  # a copy: the folder's config is left as read
