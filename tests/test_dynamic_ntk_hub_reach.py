"""A hub config.json with ``rope_type: dynamic`` keeps the pre-trained length L in ``max_position_embeddings``
(transformers reads L from it): the spec read from it must reach L * factor positions, not stop at L."""

import pytest


@pytest.mark.parametrize("original, factor", [(4096, 3.0), (2048, 8.0)])
def test_a_dynamic_entry_covers_the_original_length_times_its_factor(original, factor):
    from torchtune_longshort.models.hf_rope import rope_spec_from_hf_config

    config = {"hidden_size": 512, "num_attention_heads": 4, "head_dim": 128, "max_position_embeddings": original,
              "rope_theta": 1e4, "rope_scaling": {"rope_type": "dynamic", "factor": factor}}
    spec = rope_spec_from_hf_config(config)
    assert spec["original_max_seq_len"] == original
    assert spec["max_seq_len"] == original * int(factor)  # closed form: L' = L * s
