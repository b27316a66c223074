"""A ``--use_cache`` signed by a longshort-eval whose signature had other fields (one added or dropped since) is
refused naming the field, not as "another model ()" when the field's value here is None, nor with an
``AttributeError`` traceback for a signature that is no mapping."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.model.response_cache import OWNER_KEY, cache_identity, owner_refusal  # noqa: E402

HERE = {"checkpoint_fingerprint": "9c55c0293b1a282b", "max_length": 256, "add_bos_token": None}


@pytest.mark.parametrize("signed", [
    {k: v for k, v in HERE.items() if k != "add_bos_token"},  # an older signature: the field added since
    {**HERE, "attention": "sdpa"},  # a newer one: a field this version does not sign
])
def test_a_field_only_one_signature_holds_is_named(signed):
    why = owner_refusal({OWNER_KEY: signed, "0" * 64: -1.0}, HERE)
    assert why is not None and why.startswith("--use_cache: ") and "\n" not in why
    (field,) = set(signed) ^ set(HERE)  # the field one of the two signatures lacks
    assert f"({field} " in why and "not recorded" in why


def test_a_signature_that_is_no_mapping_is_refused_in_one_line():
    why = owner_refusal({OWNER_KEY: "hf", "0" * 64: -1.0}, HERE)
    assert why is not None and why.startswith("--use_cache: ") and "'hf'" in why


def test_the_same_signature_is_accepted():
    assert owner_refusal({OWNER_KEY: dict(HERE), "0" * 64: -1.0}, HERE) is None


def test_each_setting_the_answers_depend_on_signs_the_cache(tmp_path):
    """A run that changes any one setting its answers depend on (the docstring's list, add_bos_token included) is
    signed apart, so it is refused the other's cached answers."""
    (tmp_path / "tokenizer.model").write_bytes(b"x")
    base = {"tokenizer": SimpleNamespace(format="sentencepiece", path=str(tmp_path / "tokenizer.model")),
            "rope_spec": None, "max_length": 256, "allow_extrapolation": False, "dtype": "bfloat16",
            "truncation": "left", "max_gen_toks": 32, "add_bos_token": None}
    changed = {"rope_spec": "linear:2", "max_length": 512, "allow_extrapolation": True, "dtype": "float32",
               "truncation": "right", "max_gen_toks": 64, "add_bos_token": True}
    first = cache_identity(SimpleNamespace(**base), "fp")
    assert cache_identity(SimpleNamespace(**base), "fp") == first
    assert cache_identity(SimpleNamespace(**base), "fq") != first  # another checkpoint
    for key, value in changed.items():
        assert cache_identity(SimpleNamespace(**{**base, key: value}), "fp") != first, key
