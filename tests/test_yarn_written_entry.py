"""A YaRN model's rope_scaling as written to config.json (rope_scaling_to_hf of its spec) gives transformers the
same frequencies and attention factor as the model: truncate=False and non-default betas kept. The reference:
transformers' own ROPE_INIT_FUNCTIONS['yarn'] on the written entry."""

import pytest
import torch

from torchtune_longshort.models.hf_rope import rope_scaling_to_hf
from torchtune_longshort.rope import build_rope


@pytest.mark.parametrize("truncate", [False, True])
def test_the_written_entry_gives_transformers_the_models_frequencies(truncate):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = build_rope("yarn", head_dim=128, max_seq_len=32768, factor=8.0, original_max_seq_len=4096, alpha=2.0,
                      beta=16.0, truncate=truncate)
    entry = rope_scaling_to_hf(rope.spec())
    config = LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=128, max_position_embeddings=32768,
                         rope_parameters={**entry, "rope_theta": rope.base})
    want, want_scale = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(rope.theta, want.float(), rtol=1e-6, atol=0)
    assert rope.attention_scaling == pytest.approx(want_scale, rel=1e-12)


def test_a_ramp_of_zero_width_gives_transformers_frequencies_not_nan():
    """original_max_seq_len=6 (head_dim 16) puts both ends of the ramp at dimension 0; the released code's guard
    widens it by 0.001 (a division by zero: NaN frequencies, a model of NaN logits, without it)."""
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    rope = build_rope("yarn", head_dim=16, max_seq_len=24, factor=4.0, original_max_seq_len=6)
    assert rope.ramp_bounds() == (0, 0)
    config = LlamaConfig(hidden_size=64, num_attention_heads=4, head_dim=16, max_position_embeddings=24,
                         rope_parameters={**rope_scaling_to_hf(rope.spec()), "rope_theta": rope.base})
    want, _ = ROPE_INIT_FUNCTIONS["yarn"](config, "cpu")
    torch.testing.assert_close(rope.theta, want.float(), rtol=1e-6, atol=0)
