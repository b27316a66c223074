"""NTK and dynamic NTK as written into config.json, read back by transformers' own RoPE init functions.

Hand mutants that survived test_rope_formulas and test_rope_hf_parity (mutants11): NTKRoPE.hf_theta with the exponent
the other way up, (d - 2) / d (the rope_theta written for transformers then gives other frequencies than the model
trained with), DynamicNTKRoPE.hf_max_position_embeddings writing the extended length (transformers reads the pre-trained
length there: its base then switches at 4x the length), from_hf reading a hub dynamic entry as a model of the pre-
trained length only (a model written for 256 positions read back as one of 64), and NTK on head_dim 2 reaching a
ZeroDivisionError instead of its one-line refusal. The references: transformers' RoPE init functions on the written
entries, and the spec of the model that wrote them.
"""

from __future__ import annotations

import pytest
import torch

from torchtune_longshort.models.hf_rope import hf_config_updates, rope_spec_from_hf_config
from torchtune_longshort.rope import build_rope
from torchtune_longshort.rope.base import default_inv_freq

HEAD_DIM = 16
ORIG = 64


def _transformers_inv_freq(updates, **kwargs):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    params = updates["rope_parameters"]
    config = LlamaConfig(hidden_size=4 * HEAD_DIM, num_attention_heads=4, head_dim=HEAD_DIM,
                         max_position_embeddings=updates["max_position_embeddings"], rope_parameters=params)
    if params["rope_type"] == "default":  # plain RoPE of the written rope_theta
        inv_freq, _ = LlamaRotaryEmbedding.compute_default_rope_parameters(config, device="cpu")
    else:
        inv_freq, _ = ROPE_INIT_FUNCTIONS[params["rope_type"]](config, "cpu", **kwargs)
    return inv_freq.float()


def test_the_written_ntk_theta_gives_transformers_the_models_frequencies():
    rope = build_rope("ntk", head_dim=HEAD_DIM, max_seq_len=4 * ORIG, factor=4.0)
    updates = hf_config_updates({**rope.spec(), "head_dim": HEAD_DIM})
    torch.testing.assert_close(_transformers_inv_freq(updates), rope.theta, rtol=1e-6, atol=0)


@pytest.mark.parametrize("length", [ORIG, ORIG + 1, 3 * ORIG])
def test_the_written_dynamic_entry_gives_transformers_the_models_base_at_each_length(length):
    rope = build_rope("dynamic_ntk", head_dim=HEAD_DIM, max_seq_len=4 * ORIG, factor=4.0, original_max_seq_len=ORIG)
    updates = hf_config_updates({**rope.spec(), "head_dim": HEAD_DIM})
    want = _transformers_inv_freq(updates, seq_len=length)
    torch.testing.assert_close(default_inv_freq(HEAD_DIM, rope.base_for_length(length)), want, rtol=1e-5, atol=0)


def test_a_written_dynamic_entry_reads_back_as_the_model_that_wrote_it():
    rope = build_rope("dynamic_ntk", head_dim=HEAD_DIM, max_seq_len=4 * ORIG, factor=4.0, original_max_seq_len=ORIG)
    updates = hf_config_updates({**rope.spec(), "head_dim": HEAD_DIM})
    config = {"hidden_size": 4 * HEAD_DIM, "num_attention_heads": 4, "head_dim": HEAD_DIM,
              **{k: v for k, v in updates.items() if k != "longshort_rope"}}  # transformers' entries alone
    assert rope_spec_from_hf_config(config) == rope.spec()  # max_seq_len 4 x 64 (transformers' entry: 64, x4)


@pytest.mark.parametrize("method, kwargs", [("ntk", {}), ("dynamic_ntk", {"original_max_seq_len": ORIG})])
def test_ntk_on_head_dim_2_is_refused_in_one_line(method, kwargs):
    with pytest.raises(ValueError, match=rf"^head_dim=2 is not accepted for {method}: the exponent dim/\(dim-2\)"):
        build_rope(method, head_dim=2, max_seq_len=256, factor=2.0, **kwargs)
