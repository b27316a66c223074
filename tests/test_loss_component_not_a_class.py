"""``loss._component_`` naming a function, not a class (``os.getcwd``): the
config check refuses it in one line like any other component that is no LongShortLoss, not with issubclass()'s
TypeError (Python's own refusal of a non-class, the reference) (mutants18)."""

from __future__ import annotations

import os

import pytest
from recipe_config import make_cfg

FUNCTION = "os.getcwd"


def test_a_function_as_the_loss_component_is_refused_in_one_line(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    from torchtune_longshort.loss import LongShortLoss
    from torchtune_longshort.training.recipe_config import load_recipe_config

    with pytest.raises(TypeError):
        issubclass(os.getcwd, LongShortLoss)
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=rf"^loss._component_='{FUNCTION}' is not accepted: expected "
                                         r"torchtune_longshort.loss.LongShortLoss or a subclass$"):
        load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, loss={"_component_": FUNCTION}))
    assert not out.exists()
