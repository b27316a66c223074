"""Edges of the LoRA keyword check (``models/lora_settings``) that the config-level tests do not reach, each against a
reference outside the check: torch's own Dropout bound, torchtune's builder defaults and weight-name map, and the
float arithmetic that an infinite alpha brings."""

from __future__ import annotations

import inspect
import math

import pytest
import torch
import yaml

from torchtune_longshort.models.lora_settings import check_lora_settings

GOOD = {"lora_rank": 8, "lora_alpha": 16}


def test_a_negative_dropout_is_refused_as_torch_refuses_it():
    with pytest.raises(ValueError, match="between 0 and 1"):
        torch.nn.Dropout(p=-0.1)  # the reference: torch takes no negative probability either
    with pytest.raises(ValueError, match=r"^model\.lora_dropout=-0\.1 is not accepted: expected a number in \[0, 1\)"):
        check_lora_settings({**GOOD, "lora_dropout": -0.1})


def test_an_infinite_alpha_is_refused():
    """alpha / rank = inf times torchtune's zero-initialised B gives NaN adapters (IEEE: inf x 0)."""
    assert math.isnan(float("inf") / 8 * 0.0)
    with pytest.raises(ValueError, match=r"^model\.lora_alpha=inf is not accepted: expected a number > 0"):
        check_lora_settings({**GOOD, "lora_alpha": float("inf")})


@pytest.mark.parametrize("key", ["lora_rank", "lora_alpha"])
def test_a_yaml_boolean_is_no_rank_or_alpha(key):
    """``lora_rank: true`` reads as a bool, which Python counts as the int 1: refused, not built as rank 1."""
    value = yaml.safe_load("true")
    assert isinstance(value, int)  # the trap the check must see past
    with pytest.raises(ValueError, match=rf"^model\.{key}=True is not accepted"):
        check_lora_settings({**GOOD, key: value})


def test_transformers_name_in_capitals_still_gets_torchtunes_name():
    """``O_proj`` is transformers' ``o_proj`` (names compared without case); the hint is torchtune's name for it, as
    torchtune's own HF weight map gives it."""
    from torchtune.models.convert_weights import _FROM_HF

    tt = _FROM_HF["model.layers.{}.self_attn.o_proj.weight"].split(".")[-2]
    with pytest.raises(ValueError, match=rf"'O_proj' is not a module .*\(for 'O_proj' use '{tt}'\)"):
        check_lora_settings({**GOOD, "lora_attn_modules": ["O_proj"]})


def test_a_typo_of_a_transformers_name_gets_torchtunes_name_for_it():
    """``o_projj`` (one key too many on ``o_proj``) was told "use 'v_proj'" (the nearest of torchtune's four names);
    it is nearest transformers' ``o_proj``, whose torchtune name (torchtune's HF weight map) is the hint now."""
    import difflib

    from torchtune.models.convert_weights import _FROM_HF

    hf = {k.split(".")[-2]: v.split(".")[-2] for k, v in _FROM_HF.items() if ".self_attn." in k and v}
    assert difflib.get_close_matches("o_projj", list(hf), n=1) == ["o_proj"]
    with pytest.raises(ValueError, match=rf"\(for 'o_projj' use '{hf['o_proj']}'\)"):
        check_lora_settings({**GOOD, "lora_attn_modules": ["o_projj"]})


def test_torchtunes_default_lora_values_without_a_rank_are_full_fine_tuning():
    """The values torchtune's LoRA builder takes when none is given change nothing: no refusal without lora_rank."""
    from torchtune.models.llama2 import lora_llama2

    params = inspect.signature(lora_llama2).parameters
    defaults = {k: params[k].default for k in ("lora_dropout", "apply_lora_to_mlp", "apply_lora_to_output",
                                               "quantize_base")}
    assert defaults["lora_dropout"] == 0.0 and defaults["quantize_base"] is False
    check_lora_settings(defaults)  # nothing raised


def test_no_lora_attn_modules_key_is_accepted():
    """A node without ``lora_attn_modules`` builds adapters on q and v (only ``[]`` is refused): torchtune's
    LoRALinear sits on those two projections of the built model."""
    from torchtune.modules.peft import LoRALinear

    from torchtune_longshort.models import hf_decoder

    check_lora_settings(dict(GOOD))
    model = hf_decoder(family="llama", vocab_size=64, num_layers=1, num_heads=4, num_kv_heads=2, embed_dim=32,
                       intermediate_dim=64, max_seq_len=64, **GOOD)
    attn = model.layers[0].attn
    assert [n for n in ("q_proj", "k_proj", "v_proj", "output_proj") if isinstance(getattr(attn, n), LoRALinear)] \
        == ["q_proj", "v_proj"]
