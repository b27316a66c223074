"""LongRoPE entries as written into config.json and read from the hub, checked by transformers' own init function.

Hand mutants that survived test_rope_longrope and test_rope_hf_parity (mutants11): to_hf or extra_spec leaving a given
attention_factor out of the written entry (a model run with attention_factor 1.3 saved for transformers, which then
takes sqrt(1 + ln s / ln L)), from_hf taking 4096 for the pre-trained length of an entry that names none (transformers
takes max_position_embeddings: another switch and another attention factor), and a divisor of 0 let through (1 / (0 *
base^(2i/d)): an infinite frequency, NaN logits) where it is refused in one line. The reference: transformers'
``ROPE_INIT_FUNCTIONS['longrope']``.
"""

from __future__ import annotations

import copy

import pytest
import torch

from torchtune_longshort.models.hf_rope import hf_config_updates, rope_spec_from_hf_config
from torchtune_longshort.rope import build_rope

HEAD_DIM = 16
SHORT = [1.0 + 0.1 * i for i in range(HEAD_DIM // 2)]
LONG = [2.0 + 0.5 * i for i in range(HEAD_DIM // 2)]


def _transformers(config):
    from transformers import LlamaConfig
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    inv_freq, scaling = ROPE_INIT_FUNCTIONS["longrope"](LlamaConfig(**config), "cpu")
    return inv_freq.float(), scaling


def _built(spec):
    kwargs = {k: v for k, v in spec.items() if k not in ("method", "base", "max_seq_len")}
    return build_rope("longrope", head_dim=HEAD_DIM, max_seq_len=8, base=spec["base"], **kwargs)


def test_a_written_attention_factor_reaches_transformers():
    rope = build_rope("longrope", head_dim=HEAD_DIM, max_seq_len=256, short_factor=SHORT, long_factor=LONG,
                      original_max_seq_len=64, factor=4.0, attention_factor=1.3)
    updates = hf_config_updates({**rope.spec(), "head_dim": HEAD_DIM})
    config = {"hidden_size": 4 * HEAD_DIM, "num_attention_heads": 4, "head_dim": HEAD_DIM,
              **{k: v for k, v in updates.items() if k not in ("longshort_rope", "rope_scaling")}}
    inv_freq, scaling = _transformers(config)
    assert scaling == pytest.approx(1.3, rel=1e-12) == rope.attention_scaling
    torch.testing.assert_close(inv_freq, rope.theta, rtol=1e-6, atol=0)


def test_an_entry_without_its_pre_trained_length_takes_max_position_embeddings_as_transformers_does():
    entry = {"rope_type": "longrope", "short_factor": SHORT, "long_factor": LONG, "factor": 4.0, "rope_theta": 1e4}
    config = {"hidden_size": 4 * HEAD_DIM, "num_attention_heads": 4, "head_dim": HEAD_DIM,
              "max_position_embeddings": 256, "rope_parameters": entry}
    rope = _built(rope_spec_from_hf_config(copy.deepcopy(config)))
    _, scaling = _transformers(copy.deepcopy(config))  # LlamaConfig fills the length into the entry it is given
    assert rope.original_max_seq_len == 256
    assert rope.attention_scaling == pytest.approx(scaling, rel=1e-12)


@pytest.mark.parametrize("which", ["short_factor", "long_factor"])
def test_a_divisor_of_zero_is_refused_in_one_line(which):
    lists = {"short_factor": list(SHORT), "long_factor": list(LONG)}
    lists[which][3] = 0
    with pytest.raises(ValueError, match=rf"^{which} holds 0: expected finite numbers > 0"):
        build_rope("longrope", head_dim=HEAD_DIM, max_seq_len=256, original_max_seq_len=64, factor=4.0, **lists)
