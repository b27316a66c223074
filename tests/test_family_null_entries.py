"""Hand mutants of models/family_builders that survived (mutants41): a ``"rope_scaling": null`` taken for the RoPE
entry (the base inside ``rope_parameters`` passed over for the top-level one), a ``"num_key_value_heads": null``
read as the class default (Qwen2Config's 32) where transformers reads ``num_attention_heads``, and an
``"rms_norm_eps": 0`` replaced by the builder's default. The reference: transformers' own config classes and rotary
embedding, built from the same config.json."""

from __future__ import annotations

from torchtune_longshort.models.family_builders import kv_heads, norm_eps, rope_theta

DIMS = dict(vocab_size=32, hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
            max_position_embeddings=128)


def _hf(config):
    from transformers import CONFIG_MAPPING

    return CONFIG_MAPPING[config["model_type"]].from_dict(dict(config))


def test_a_null_rope_scaling_leaves_the_base_inside_rope_parameters():
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    config = dict(DIMS, model_type="llama", rope_theta=10_000.0, rope_scaling=None,
                  rope_parameters={"rope_type": "default", "rope_theta": 50_000.0})
    inv_freq = LlamaRotaryEmbedding(_hf(config)).inv_freq
    head_dim = DIMS["hidden_size"] // DIMS["num_attention_heads"]
    base = rope_theta(config)
    assert abs(float(inv_freq[1]) - base ** (-2 / head_dim)) < 1e-6 * float(inv_freq[1])


def test_a_null_kv_head_count_is_read_as_transformers_reads_it():
    config = dict(DIMS, model_type="qwen2", num_key_value_heads=None)
    assert kv_heads(config) == _hf(config).num_key_value_heads


def test_a_zero_norm_epsilon_is_the_one_transformers_reads():
    config = dict(DIMS, model_type="llama", rms_norm_eps=0.0)
    assert norm_eps(config, 1e-6) == _hf(config).rms_norm_eps
