"""A YaRN spec that leaves alpha, beta and truncate to their defaults (as a YAML ``rope:`` block or a
``--rope yarn,rope_factor=8`` override writes it) and the entry rope_scaling_to_hf writes from it give the same
frequencies: transformers' own ROPE_INIT_FUNCTIONS['yarn'] on the written entry is the reference."""

import pytest
import torch


def test_an_entry_written_from_a_spec_without_betas_gives_transformers_the_models_frequencies():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from torchtune_longshort.models.hf_rope import rope_scaling_to_hf
    from torchtune_longshort.rope import build_rope

    spec = {"method": "yarn", "base": 1e4, "factor": 8.0, "original_max_seq_len": 4096, "max_seq_len": 32768}
    rope = build_rope("yarn", head_dim=128, max_seq_len=32768, base=1e4, factor=8.0, original_max_seq_len=4096)
    config = LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=128, max_position_embeddings=32768,
                         rope_parameters={**rope_scaling_to_hf(spec), "rope_theta": 1e4})
    want, want_scale = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(rope.theta, want.float(), rtol=1e-6, atol=0)
    assert rope.attention_scaling == pytest.approx(want_scale, rel=1e-12)
