"""Hand mutants of models/hf_config_checks that survived (mutants41): a folder whose ``architectures`` list a causal
LM beside another head refused as no causal LM, ``max_position_embeddings: 0`` opened as a count of positions, and
``rms_norm_eps: true`` read as 1.0. The references: transformers' own table of causal-LM classes, the count's
documented floor (one position), and the validator transformers' strict config class runs on its own field type."""

from __future__ import annotations

from pathlib import Path

import pytest

from torchtune_longshort.models.hf_config_checks import (check_causal_lm, check_max_position_embeddings,
                                                          check_rms_norm_eps)

WHERE = Path("ckpt/config.json")


def test_a_causal_lm_listed_beside_another_head_is_a_causal_lm():
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    arch = ["LlamaForSequenceClassification", "LlamaForCausalLM"]
    assert arch[1] in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()
    assert arch[0] not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values()
    check_causal_lm({"architectures": arch}, WHERE)  # no refusal
    with pytest.raises(ValueError, match="is not a causal language model"):
        check_causal_lm({"architectures": arch[:1]}, WHERE)


def test_zero_positions_are_no_count_of_positions():
    check_max_position_embeddings({"max_position_embeddings": 1}, WHERE)
    with pytest.raises(ValueError, match=r"config.json: max_position_embeddings=0 is not a count of positions"):
        check_max_position_embeddings({"max_position_embeddings": 0}, WHERE)


def test_a_json_true_is_no_norm_epsilon_as_transformers_refuses_it():
    from huggingface_hub.dataclasses import type_validator
    from transformers import LlamaConfig

    with pytest.raises(TypeError):
        type_validator("rms_norm_eps", True, LlamaConfig.__dataclass_fields__["rms_norm_eps"].type)
    with pytest.raises(ValueError, match=r"config.json: rms_norm_eps=True is not a norm epsilon"):
        check_rms_norm_eps({"rms_norm_eps": True}, WHERE)
