"""``ModelFamily.check_builds`` (the builder's refusals on the meta device, asked by ``longshort-validate`` and by
``family_of`` for a model_type read under the other tying) reads no ``max_position_embeddings``: it built at
``int(config.get("max_position_embeddings") or 4096)``, a default of its own (transformers' LlamaConfig gives 2048),
and ``family_of`` runs before the folder's check of that key, so a ``"x"`` there was refused as int()'s
"invalid literal for int() with base 10: 'x'", naming no file or key (Infinity: OverflowError's traceback).

Reference: the refusal of the same config.json with a count of positions transformers accepts."""

from __future__ import annotations

import pytest

from torchtune_longshort.models.families import UnsupportedModelError, family_of

# a phi3 config.json that ties its embeddings: the phi3 family reads the untied one only (the tying refusal)
TIED_PHI3 = {"model_type": "phi3", "tie_word_embeddings": True, "hidden_size": 64, "num_attention_heads": 4,
             "num_key_value_heads": 4, "num_hidden_layers": 1, "intermediate_size": 64, "vocab_size": 100}


def _refusal(config) -> str:
    with pytest.raises(UnsupportedModelError) as e:
        family_of(config, where="m/config.json")
    return str(e.value)


@pytest.mark.parametrize("positions", ["x", float("inf"), 0, None])
def test_the_builder_check_gives_the_same_refusal_whatever_the_positions_say(positions):
    from transformers import Phi3Config

    reference = _refusal({**TIED_PHI3, "max_position_embeddings": Phi3Config().max_position_embeddings})
    assert reference.startswith("m/config.json: model_type='phi3' (tie_word_embeddings=True) is not a supported")
    assert _refusal({**TIED_PHI3, "max_position_embeddings": positions}) == reference
    assert _refusal(TIED_PHI3) == reference  # no key at all
