"""A config.json that leaves a key out is read as transformers reads it: each family's builder takes the default of
transformers' own config class (the reference, asked here, never restated)."""

from __future__ import annotations

import pytest
import torch

from torchtune_longshort.models.families import MODEL_FAMILIES, family_of

# tiny dimensions every family's builder takes (head_dim 8, GQA 4/2)
DIMS = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=64)
FAMILIES = {"llama": "LlamaConfig", "mistral": "MistralConfig", "qwen2": "Qwen2Config", "gemma": "GemmaConfig",
            "phi3": "Phi3Config"}
ACTIVATIONS = {"gemma": "gelu_pytorch_tanh"}


def _hf_default(family: str, key: str):
    import transformers

    return getattr(getattr(transformers, FAMILIES[family])(), key)


def _config(family: str, **extra):
    model_type = MODEL_FAMILIES[family].hf_model_type
    return dict(DIMS, model_type=model_type, hidden_act=ACTIVATIONS.get(family, "silu"), **extra)


def _built(family: str, config):
    with torch.device("meta"):
        return family_of(config).build(config, 64, None)


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_config_without_rms_norm_eps_gets_transformers_default(family):
    config = _config(family, tie_word_embeddings=MODEL_FAMILIES[family].tied_default)
    model = _built(family, config)
    eps = {m.eps for m in model.modules() if type(m).__name__.endswith("RMSNorm")}
    assert eps == {_hf_default(family, "rms_norm_eps")}
