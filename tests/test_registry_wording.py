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


def test_a_name_with_a_part_python_cannot_import_is_not_a_dotted_path():
    """'my-divs.f', 'jeffreys.', 'js x.y': a part that is no identifier (str.isidentifier, the reference) is no module
    path, nor is one identifier alone ('jefreys'); each is an unknown name, told the shipped names, not an import to
    attempt."""
    for name in ("my-divs.f", "jeffreys.", "js x.y", "torch.nn.1x", "jefreys"):
        parts = name.split(".")
        assert len(parts) < 2 or not all(p.isidentifier() for p in parts)
        assert _refusal(divergence_fn, name).startswith(f"divergence={name!r} is not known; choose one of ")
        with pytest.raises(KeyError):
            ROPE_METHODS[name]
        assert name not in ROPE_METHODS and name not in MODEL_FAMILIES


def test_a_failed_import_of_its_own_package_is_told_the_module_was_found(tmp_path, monkeypatch):
    """own_pkg/mixed.py's `from own_pkg import helper_gone`: an ImportError (not ModuleNotFoundError) whose name is
    the module's own package; own_pkg.mixed was found, so pip install / PYTHONPATH is not the fix."""
    from user_modules import forget_user_module, write_user_module

    write_user_module(tmp_path, {"own_reg_pkg/__init__.py": "", "own_reg_pkg/mixed.py":
                                 "from own_reg_pkg import helper_gone\n\n\nclass R:\n    pass\n"}, monkeypatch)
    try:
        with pytest.raises(ImportError) as raised:  # the reference: what Python raises importing it
            __import__("own_reg_pkg.mixed")
        assert type(raised.value) is ImportError and raised.value.name == "own_reg_pkg"
        forget_user_module("own_reg_pkg")
        assert _refusal(ROPE_METHODS.__getitem__, "own_reg_pkg.mixed.R").endswith(
            "module own_reg_pkg.mixed was found, but an import in it failed: install what it imports (or mend that "
            "import) in every process that builds or loads the model")
    finally:
        forget_user_module("own_reg_pkg")


def test_a_shipped_family_named_by_a_path_of_ones_own_is_the_shipped_row(tmp_path, monkeypatch):
    """my_families.LLAMA = MODEL_FAMILIES['llama'] (a shipped row under a name of one's own): it is the shipped row
    itself, named 'llama' (what a checkpoint records; a process reading it back needs no module of one's own), as a
    shipped RoPE class named by a path keeps its own name."""
    from user_modules import forget_user_module, write_user_module

    write_user_module(tmp_path, {"own_alias_families.py": "from torchtune_longshort.models import MODEL_FAMILIES\n"
                                 "LLAMA = MODEL_FAMILIES['llama']\n"}, monkeypatch)
    try:
        row = MODEL_FAMILIES["own_alias_families.LLAMA"]
        assert row is dict.__getitem__(MODEL_FAMILIES, "llama") and row.name == "llama"
    finally:
        forget_user_module("own_alias_families")
