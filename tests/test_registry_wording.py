"""The shared dotted-path registry (rope/registry.py) words its refusals per registry: a divergence that does not
import was told to be importable 'in every process that builds or loads the model' (the RoPE methods' and model
families' words), and a path naming a module read "'torch.nn' names module in module torch"."""

from __future__ import annotations

import types

import pytest
import torch

from torchtune_longshort.loss.divergences import divergence_fn
from torchtune_longshort.models import MODEL_FAMILIES
from torchtune_longshort.rope import ROPE_METHODS


def _refusal(lookup, path):
    with pytest.raises(ValueError) as info:
        lookup(path)
    return str(info.value)


def test_a_module_is_named_as_a_module():
    assert isinstance(torch.nn, types.ModuleType)  # the reference: torch.nn is a module, an attribute of torch
    assert _refusal(divergence_fn, "torch.nn") == (
        "divergence='torch.nn': 'torch.nn' names the module torch.nn in module torch: a divergence of your own is a "
        "function (logits_p, logits_q) -> per-position values ([..., vocab] logits in, [...] float32 out)")
    assert _refusal(ROPE_METHODS.__getitem__, "torch.nn") == (
        "'torch.nn' names the module torch.nn in module torch: a RoPE method of your own is a subclass of "
        "torchtune_longshort.rope.base.ScaledRoPE")


def test_an_import_refusal_names_the_processes_of_its_registry():
    tail = "(pip install its package, or put its folder on PYTHONPATH)"
    assert _refusal(divergence_fn, "no_such_divs_mod.f").endswith(
        "a divergence of your own must be importable in every process that computes the loss or the misalignment "
        f"metric {tail}")
    for registry, what in ((ROPE_METHODS, "RoPE method"), (MODEL_FAMILIES, "model family")):
        assert _refusal(registry.__getitem__, "no_such_own_mod.X").endswith(
            f"a {what} of your own must be importable in every process that builds or loads the model {tail}")
