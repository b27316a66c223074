"""The rotated fraction of a head is read from the RoPE entry transformers reads (``rope_scaling or
rope_parameters``), not from ``rope_parameters`` whatever ``rope_scaling`` holds: a Phi-4-mini-style folder with
``rope_scaling.partial_rotary_factor`` 0.75 was built rotating every dimension (logits 8e-3 off transformers',
without a word), and one whose stale ``rope_parameters`` said 0.75 under a ``rope_scaling`` that rotates whole heads
was refused.

Reference: transformers on the same config.json (``AutoConfig.from_pretrained`` on the folder): the fraction Phi-3's
rotary embedding reads from the config it builds, and for a scaled Llama the inverse frequencies of
``ROPE_INIT_FUNCTIONS`` (the rotated dimensions are twice their count)."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.models.family_builders import UnsupportedModelError, partial_rotary_factor
from torchtune_longshort.models.families import family_of

HEAD = 32
DIMS = {"vocab_size": 64, "hidden_size": 2 * HEAD, "intermediate_size": 128, "num_hidden_layers": 1,
        "num_attention_heads": 2, "num_key_value_heads": 2, "max_position_embeddings": 256}
DEFAULT = {"rope_type": "default", "rope_theta": 10000.0}
# (rope_scaling, rope_parameters): each pair disagrees on the fraction
PHI3_CASES = {
    "scaling_holds_it": ({**DEFAULT, "partial_rotary_factor": 0.75}, None),
    "parameters_stale": (dict(DEFAULT), {**DEFAULT, "partial_rotary_factor": 0.75}),
}


def _hf_config(tmp_path, config):
    from transformers import AutoConfig

    (tmp_path / "config.json").write_text(json.dumps(config))
    return AutoConfig.from_pretrained(tmp_path)


def _config(model_type, scaling, parameters):
    return {**DIMS, "model_type": model_type, "rope_scaling": scaling, "rope_parameters": parameters}


@pytest.mark.parametrize("case", PHI3_CASES)
def test_phi3_rotates_what_transformers_rotates(tmp_path, case):
    config = _config("phi3", *PHI3_CASES[case])
    # Phi3RotaryEmbedding.compute_default_rope_parameters: int(head_dim * rope_parameters["partial_rotary_factor"])
    rotated = int(HEAD * _hf_config(tmp_path, config).rope_parameters.get("partial_rotary_factor", 1.0))
    assert int(HEAD * partial_rotary_factor(config)) == rotated
    family = family_of(config)
    if rotated == HEAD:
        family.check_builds(config)  # torchtune's phi3 builder rotates whole heads: this one it builds
    else:
        with pytest.raises(UnsupportedModelError, match=r"rope_scaling\.partial_rotary_factor=0\.75 != 1"):
            family.check_builds(config)


def test_a_scaled_llama_entry_gives_transformers_rotary_dim(tmp_path):
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    linear = {"rope_type": "linear", "factor": 2.0, "rope_theta": 10000.0}
    for scaling, parameters in (({**linear, "partial_rotary_factor": 0.5}, dict(linear)),
                                (linear, {**linear, "partial_rotary_factor": 0.5})):
        config = _config("llama", scaling, parameters)
        inv_freq, _ = ROPE_INIT_FUNCTIONS["linear"](_hf_config(tmp_path, config), "cpu")
        assert int(HEAD * partial_rotary_factor(config)) == 2 * inv_freq.numel()
