"""A LongRoPE entry without ``factor`` (Phi-3-mini-128k's spelling) takes s = max_position_embeddings /
original_max_position_embeddings for its attention factor sqrt(1 + ln s / ln L): a true quotient, also where the two
lengths are no multiple of each other. The reference: transformers' ROPE_INIT_FUNCTIONS['longrope'] on the entry."""

import copy

import pytest

HEAD_DIM = 16


def test_an_entry_without_a_factor_takes_the_quotient_of_its_lengths_as_transformers_does():
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    from torchtune_longshort.models.hf_rope import rope_spec_from_hf_config
    from torchtune_longshort.rope import build_rope

    entry = {"rope_type": "longrope", "short_factor": [1.0] * (HEAD_DIM // 2), "long_factor": [3.0] * (HEAD_DIM // 2),
             "original_max_position_embeddings": 64, "rope_theta": 1e4}
    config = {"hidden_size": 4 * HEAD_DIM, "num_attention_heads": 4, "head_dim": HEAD_DIM,
              "max_position_embeddings": 200, "rope_parameters": entry}  # s = 200 / 64 = 3.125
    spec = rope_spec_from_hf_config(copy.deepcopy(config))
    _, want = ROPE_INIT_FUNCTIONS["longrope"](LlamaConfig(**copy.deepcopy(config)), "cpu")
    kwargs = {k: v for k, v in spec.items() if k not in ("method", "base", "max_seq_len")}
    rope = build_rope("longrope", head_dim=HEAD_DIM, max_seq_len=8, base=spec["base"], **kwargs)
    assert rope.attention_scaling == pytest.approx(want, rel=1e-12)
