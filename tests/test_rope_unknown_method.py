"""An unknown RoPE method name is refused by one function of the registry (``rope.check_rope_method``), so every
place that takes a method name gives the same one-line message: the field, the value, the nearest name (or that the
name is a position-id sampler) and the accepted names.

Reference: the message written out here from ``ROPE_METHODS`` itself, for each entry point."""

from __future__ import annotations

import pytest
from torchtune.models.llama2 import llama2

from torchtune_longshort.models.hf_rope import rope_scaling_to_hf, rope_spec_from_hf_config
from torchtune_longshort.models.rope_scaling import apply_rope_scaling
from torchtune_longshort.rope import ROPE_METHODS, build_rope
from torchtune_longshort.study.values import rope_method
from torchtune_longshort.training.recipe_config.components import ModelConfig
from torchtune_longshort.config.fields import build_section

TINY = {"_component_": "torchtune.models.llama2.llama2", "vocab_size": 64, "num_layers": 1, "num_heads": 2,
        "num_kv_heads": 1, "embed_dim": 16, "max_seq_len": 32}


def _model():
    return llama2(**{k: v for k, v in TINY.items() if k != "_component_"})


# entry point -> (the field it names, a call that passes it the method name)
ENTRY_POINTS = {
    "build_rope": ("method", lambda m: build_rope(m, head_dim=8, max_seq_len=64)),
    "apply_rope_scaling": ("method", lambda m: apply_rope_scaling(_model(), m, 64)),
    "rope_scaling_to_hf": ("longshort_rope.method", lambda m: rope_scaling_to_hf({"method": m, "max_seq_len": 64})),
    "rope_spec_from_hf_config": ("config.json: longshort_rope.method", lambda m: rope_spec_from_hf_config(
        {"hidden_size": 16, "num_attention_heads": 2, "longshort_rope": {"method": m}}, "config.json")),
    "recipe config": ("model.method", lambda m: build_section(
        ModelConfig, {"_component_": "torchtune_longshort.models.rope_scaled", "method": m, "max_seq_len": 64,
                      "model": dict(TINY)}, "model")),
    "study config": ("methods.pi.method", lambda m: rope_method("methods.pi.method", m)),
}
ACCEPTED = (f"expected one of {sorted(ROPE_METHODS)} (torchtune_longshort.rope.ROPE_METHODS), or the dotted path of a "
            "ScaledRoPE subclass of your own, e.g. my_module.MyRoPE (importable: installed, or its folder on PYTHONPATH)")


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_misspelt_method_gets_the_same_did_you_mean_everywhere(entry):
    field, call = ENTRY_POINTS[entry]
    with pytest.raises(ValueError) as err:
        call("yarnn")
    assert str(err.value) == f"{field}='yarnn' is not a RoPE method (did you mean 'yarn'?): {ACCEPTED}"


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_position_sampler_is_named_as_one_everywhere(entry):
    field, call = ENTRY_POINTS[entry]
    with pytest.raises(ValueError) as err:
        call("pose")
    assert str(err.value) == (
        f"{field}='pose' is not a RoPE method (a position-id sampler, not a frequency method: build it with "
        f"build_position_sampler('pose', ...) and pass its positions as input_pos): {ACCEPTED}")


@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_a_dotted_path_that_does_not_import_is_named_with_why_everywhere(entry):
    field, call = ENTRY_POINTS[entry]
    with pytest.raises(ValueError) as err:
        call("no_such_pkg_here.MyRoPE")
    assert str(err.value) == (
        f"{field}='no_such_pkg_here.MyRoPE' is not a RoPE method: 'no_such_pkg_here.MyRoPE' does not import "
        "(ModuleNotFoundError: No module named 'no_such_pkg_here'): a RoPE method of your own must be importable in "
        "every process that builds or loads the model (pip install its package, or put its folder on PYTHONPATH)")


def test_a_name_far_from_every_method_gets_no_guess():
    with pytest.raises(ValueError) as err:
        build_rope("zzzz", head_dim=8, max_seq_len=64)
    assert str(err.value) == f"method='zzzz' is not a RoPE method: {ACCEPTED}"


def test_every_method_has_a_row_in_the_docs_table():
    """docs/rope.md's methods table names every ROPE_METHODS entry (``ntk_by_parts`` was missing from it)."""
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[1] / "docs" / "rope.md").read_text()
    table = doc[doc.index("## Methods"):].split("\n\n")[1]
    rows = {line.split("|")[1].strip().strip("`") for line in table.splitlines() if line.startswith("| `")}
    assert rows == set(ROPE_METHODS)


def test_a_misspelt_method_parameter_from_python_gets_the_did_you_mean_the_config_gives():
    """``apply_rope_scaling(model, "yarn", 64, alhpa=2)`` was Python's bare "unexpected keyword argument 'alhpa'";
    the config check (``model.alhpa``) named 'alpha' and the list. The reference: the method's own signature."""
    import inspect

    takes = sorted(set(inspect.signature(ROPE_METHODS["yarn"].__init__).parameters) - {"self", "dim", "max_seq_len",
                                                                                        "base"})
    for call in (lambda: build_rope("yarn", head_dim=8, max_seq_len=64, factor=2, original_max_seq_len=32, alhpa=2),
                 lambda: apply_rope_scaling(_model(), "yarn", 64, alhpa=2)):
        with pytest.raises(TypeError, match=r"^rope method 'yarn': alhpa=2 is not one of its parameters \(did you "
                                            r"mean 'alpha'\?\): it takes " + __import__("re").escape(str(takes))):
            call()
    assert build_rope("yarn", head_dim=8, max_seq_len=64, factor=2, original_max_seq_len=32, alpha=2).alpha == 2
