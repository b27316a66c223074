"""Llama-3.1 RoPE's band edges: ``low_freq_factor`` must be below ``high_freq_factor``, where transformers' own
validation of the same ``rope_scaling`` entry (``modeling_rope_utils``) says 'high_freq_factor field must be
greater than low_freq_factor'. A hand mutant letting equal edges through (``<=``) survived test_rope_formulas,
test_rope_hf_parity, test_models_rope_scaling and test_models_rope_checkpoint (mutants12)."""

from __future__ import annotations

import copy
import io
import logging

import pytest

from torchtune_longshort.rope import build_rope

D = 16


def _transformers_objects(entry) -> bool:
    """Whether transformers' LlamaConfig warns about the band edges of ``entry`` (the reference)."""
    from transformers import LlamaConfig

    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    logger = logging.getLogger("transformers")
    logger.addHandler(handler)
    try:
        LlamaConfig(max_position_embeddings=256, rope_scaling=copy.deepcopy(entry), head_dim=D, hidden_size=64,
                    num_attention_heads=4)
    finally:
        logger.removeHandler(handler)
    return "high_freq_factor field must be greater than low_freq_factor" in buf.getvalue()


@pytest.mark.parametrize("low,high", [(2.0, 2.0), (3.0, 2.0), (1.0, 4.0), (1.0, 1.5)])
def test_band_edges_are_refused_where_transformers_objects(low, high):
    entry = {"rope_type": "llama3", "factor": 4.0, "low_freq_factor": low, "high_freq_factor": high,
             "original_max_position_embeddings": 64}
    if _transformers_objects(entry):
        with pytest.raises(ValueError, match=r"0 < low_freq_factor < high_freq_factor; got "
                                             rf"low_freq_factor={low!r}, high_freq_factor={high!r}"):
            build_rope("llama3", head_dim=D, max_seq_len=256, factor=4.0, low_freq_factor=low,
                       high_freq_factor=high, original_max_seq_len=64)
    else:
        r = build_rope("llama3", head_dim=D, max_seq_len=256, factor=4.0, low_freq_factor=low,
                       high_freq_factor=high, original_max_seq_len=64)
        assert (r.low_freq_factor, r.high_freq_factor) == (low, high)
