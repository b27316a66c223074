"""Dynamic NTK below the pre-trained length: transformers keeps the plain base for every seq_len <= L (it takes
max(seq_len, L)); a trigger that fires a position early (L - 1) would shrink the base below the pre-trained one."""

import pytest
import torch


@pytest.mark.parametrize("length", [1, 4094, 4095])
def test_dynamic_ntk_base_below_the_original_length_equals_transformers_rope_init_function(length):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from torchtune_longshort.rope import build_rope
    from torchtune_longshort.rope.base import default_inv_freq

    config = LlamaConfig(hidden_size=512, num_attention_heads=4, head_dim=128, max_position_embeddings=4096,
                         rope_parameters={"rope_type": "dynamic", "factor": 3.0, "rope_theta": 1e4})
    want, _ = ROPE_INIT_FUNCTIONS["dynamic"](config, "cpu", seq_len=length)
    rope = build_rope("dynamic_ntk", head_dim=128, max_seq_len=16384, factor=3.0, original_max_seq_len=4096)
    torch.testing.assert_close(default_inv_freq(128, rope.base_for_length(length)), want.float(), rtol=1e-6, atol=0)
