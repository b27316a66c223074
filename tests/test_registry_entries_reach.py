"""A RoPE method is its own file and one ``ROPE_METHODS`` line: what the recipe's setup asks of a method reaches a
method registered there, not only the one it was first written for.

Reference: the registered method's own answer (its ``check_training_length``), called directly."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest
from torch import nn

from torchtune_longshort.rope import ROPE_METHODS, CLEXRoPE, LinearRoPE, build_rope
from torchtune_longshort.training.recipe_config.rules import check_built_model


class _ShortDrawRoPE(LinearRoPE):
    """A method whose training draw reaches twice the length it is trained at (as CLEX's can)."""

    method = "short_draw"

    def check_training_length(self, seq_len: int, field: str = "seq_len") -> None:
        if 2 * seq_len > self.max_seq_len:
            raise ValueError(f"{field}={seq_len}: short_draw's training positions reach {2 * seq_len - 1}, past "
                             f"max_seq_len={self.max_seq_len}")


def _built(rope: nn.Module) -> nn.Module:
    """The parts of a built decoder that ``check_built_model`` reads, one attention holding ``rope``."""
    model = nn.Module()
    model.tok_embeddings = nn.Embedding(8, 4)
    model.max_seq_len = rope.max_seq_len
    model.layers = nn.ModuleList([nn.Module()])
    model.layers[0].pos_embeddings = rope
    return model


def _config(seq_len: int):
    return SimpleNamespace(seq_len=seq_len, validation=None, tokenizer=SimpleNamespace(path="tok"))


def test_a_registered_methods_training_length_rule_is_asked_by_the_setup(monkeypatch):
    """``check_built_model`` asked ``check_training_length`` of ``CLEXRoPE`` modules alone (an ``isinstance`` on
    that class): a method registered with its own rule trained past its positions at whichever step first drew
    far enough."""
    monkeypatch.setitem(ROPE_METHODS, "short_draw", _ShortDrawRoPE)
    rope = build_rope("short_draw", head_dim=8, max_seq_len=64, factor=2.0)
    with pytest.raises(ValueError) as own:
        rope.check_training_length(48)
    with pytest.raises(ValueError, match="^" + re.escape(str(own.value)) + "$"):
        check_built_model(_config(48), _built(rope), SimpleNamespace(vocab_size=8), {"method": "short_draw"})
    assert check_built_model(_config(32), _built(rope), SimpleNamespace(vocab_size=8), {"method": "short_draw"}) == 8


def test_clex_training_length_is_still_refused_by_the_setup():
    rope = CLEXRoPE(16, 2048, original_max_seq_len=512, t_max=4)
    with pytest.raises(ValueError) as own:
        rope.check_training_length(768)
    with pytest.raises(ValueError, match="^" + re.escape(str(own.value)) + "$"):
        check_built_model(_config(768), _built(rope), SimpleNamespace(vocab_size=8), {"method": "clex"})
