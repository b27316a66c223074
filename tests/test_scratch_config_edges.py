"""Edges of the random-weights config writer (``models/scratch_config.llama_config``) that the config-level tests do
not reach, each against a closed form: RMSNorm's 0 / sqrt(0 + eps) at eps 0, RoPE's inverse frequencies
base^(-2i/d) at base 1 and infinity."""

from __future__ import annotations

import math

import pytest

from torchtune_longshort.models.scratch_config import llama_config

DIMS = dict(vocab_size=64, num_layers=1, num_heads=4, num_kv_heads=2, embed_dim=32, max_seq_len=64)


def test_a_zero_norm_eps_is_refused():
    """RMSNorm divides by sqrt(mean(x^2) + eps): an all-zero row at eps 0 is 0 / 0, NaN."""
    with pytest.raises(ZeroDivisionError):
        0.0 / math.sqrt(0.0 + 0.0)
    with pytest.raises(ValueError, match=r"^norm_eps=0\.0 is not accepted: expected a finite number > 0 and < 1 "):
        llama_config({**DIMS, "norm_eps": 0.0}, tied=False)
    # at 3 a unit-scale row comes out at 1 / sqrt(1 + 3) = 0.5: no longer normalized (torch's own RMSNorm)
    assert abs(float(__import__("torch").nn.RMSNorm(4, eps=3.0)(__import__("torch").ones(4))[0]) - 0.5) < 1e-6
    for eps in (1.0, 3):  # at 1, 1 / sqrt(1 + 1): not normalized either
        with pytest.raises(ValueError, match=rf"^norm_eps={eps} is not accepted: .* < 1 \(an epsilon: 1e-05 for "):
            llama_config({**DIMS, "norm_eps": eps}, tied=False)


@pytest.mark.parametrize("base", [1.0, float("inf")])
def test_a_rope_base_of_one_or_infinity_is_refused(base):
    """base^(-2i/d): every pair turns at one frequency (base 1), or all but the first not at all (infinity)."""
    head = DIMS["embed_dim"] // DIMS["num_heads"]
    freqs = [base ** (-2 * i / head) for i in range(head // 2)]
    assert len(set(freqs)) == 1 or freqs[1:] == [0.0] * (len(freqs) - 1)
    with pytest.raises(ValueError, match=rf"^rope_base={base!r} is not accepted: expected a finite number > 1$"):
        llama_config({**DIMS, "rope_base": base}, tied=False)



@pytest.mark.parametrize("tied", [True, False])
def test_the_output_tying_is_written_as_given(tied):
    """SmolLM2's and Llama-3.2's own config.json say ``"tie_word_embeddings": true`` (their output is the embedding
    matrix), Llama-2's false: the config written for random weights says what the family builds."""
    assert llama_config(dict(DIMS), tied=tied)["tie_word_embeddings"] is tied
