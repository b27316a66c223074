"""Edges of the config.json value checks run when a checkpoint folder is opened (``models/hf_config_checks``) that
the folder-level tests do not reach: called on the dicts directly, each against a reference outside the check
(json's own types, Python's float(), transformers' own head choice)."""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest

from torchtune_longshort.models.hf_config_checks import (check_causal_lm, check_max_position_embeddings,
                                                         check_rope_base)

WHERE = Path("m/config.json")


@pytest.mark.parametrize("text", ["1", "4096.0", "4096"])
def test_a_count_of_positions_as_json_writes_it_is_accepted(text):
    """1 is the least count (the rule: an integer >= 1); json reads 4096.0 as a float that is still a whole count."""
    value = json.loads(text)
    assert float(value).is_integer() and value >= 1
    check_max_position_embeddings({"max_position_embeddings": value}, WHERE)  # nothing raised


def test_a_json_true_is_no_count_of_positions():
    value = json.loads("true")
    assert isinstance(value, int) and value == 1  # the trap: Python counts the bool as the int 1
    with pytest.raises(ValueError, match=r"^m/config.json: max_position_embeddings=True is not a count of positions"):
        check_max_position_embeddings({"max_position_embeddings": value}, WHERE)


def test_an_empty_architectures_list_names_no_other_head():
    """``architectures: []`` names no head; transformers picks the causal LM from model_type, so it is no refusal."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    assert MODEL_FOR_CAUSAL_LM_MAPPING_NAMES["llama"].endswith("ForCausalLM")
    check_causal_lm({"model_type": "llama", "architectures": []}, WHERE)  # nothing raised


def test_a_null_rope_base_inside_rope_scaling_is_refused_in_one_line():
    """``rope_scaling: {rope_theta: null}`` is a base float() cannot read (TypeError, not ValueError): refused naming
    the key, not a traceback."""
    with pytest.raises(TypeError):
        float(None)
    with pytest.raises(ValueError, match=r"^m/config.json: rope_scaling.rope_theta=None is not a RoPE base"):
        check_rope_base({"rope_scaling": {"rope_type": "linear", "factor": 2.0, "rope_theta": None}}, WHERE)


def test_an_explicit_null_count_of_positions_is_refused_as_transformers_refuses_it(tmp_path, tiny_llama2_dir):
    """``"max_position_embeddings": null`` raised int()'s TypeError as a traceback where the folder was opened (eval,
    training from it as the base). transformers' own config class refuses the null too (a missing key it fills)."""
    from transformers import AutoConfig

    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_llama2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["max_position_embeddings"] = None
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(Exception, match="max_position_embeddings"):
        AutoConfig.from_pretrained(folder)
    with pytest.raises(ValueError, match=r"config.json: max_position_embeddings=null is not a count of positions"):
        CheckpointFolder.open(folder)
    with pytest.raises(ValueError, match=r"^m/config.json: max_position_embeddings=null is not a count of positions"):
        check_max_position_embeddings({"max_position_embeddings": None}, WHERE)
    check_max_position_embeddings({}, WHERE)  # no key: transformers' default applies, no refusal


@pytest.mark.parametrize("text", ["null", '"1e-5"', "Infinity", "NaN"])
def test_an_rms_norm_eps_that_is_no_finite_number_is_refused_where_the_folder_is_opened(text, tmp_path,
                                                                                         tiny_llama2_dir):
    """``"rms_norm_eps": null`` opened and then raised float()'s TypeError as a traceback in the family's builder (a
    string was read by float()); transformers' config class refuses both, and json's Infinity / NaN are no finite
    number (math.isfinite). A missing key and a number are no refusal."""
    from transformers import AutoConfig

    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_llama2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["rms_norm_eps"] = json.loads(text)
    (folder / "config.json").write_text(json.dumps(config))
    value = config["rms_norm_eps"]
    if value is None or isinstance(value, str):
        with pytest.raises(Exception, match="rms_norm_eps"):
            AutoConfig.from_pretrained(folder)
    else:
        assert not math.isfinite(value)
    shown = "null" if value is None else repr(value)
    with pytest.raises(ValueError, match=rf"config.json: rms_norm_eps={re.escape(shown)} is not a norm epsilon"):
        CheckpointFolder.open(folder)
    from torchtune_longshort.models.hf_config_checks import check_rms_norm_eps

    check_rms_norm_eps({}, WHERE)  # no key: transformers' default for the family applies
    check_rms_norm_eps({"rms_norm_eps": 1e-6}, WHERE)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "gemma", "phi3"])
def test_a_null_num_key_value_heads_is_refused_where_transformers_config_class_refuses_it(model_type, tmp_path,
                                                                                          tiny_llama2_dir):
    """``"num_key_value_heads": null`` was read as num_attention_heads for every family; MistralConfig and GemmaConfig
    refuse the null, LlamaConfig, Qwen2Config and Phi3Config read it as num_attention_heads. Ours does as the family's
    own class does, refusing where the folder is opened (before the family builds)."""
    from transformers import CONFIG_MAPPING

    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
    from torchtune_longshort.models.hf_config_checks import check_prebuild

    try:
        hf = CONFIG_MAPPING[model_type](num_key_value_heads=None)
        hf_refuses = False
        assert hf.num_key_value_heads == hf.num_attention_heads
    except Exception as e:  # huggingface_hub's StrictDataclassFieldValidationError
        assert "num_key_value_heads" in str(e)
        hf_refuses = True
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_llama2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type=model_type, num_key_value_heads=None)
    (folder / "config.json").write_text(json.dumps(config))
    if hf_refuses:
        with pytest.raises(ValueError, match=r"config.json: num_key_value_heads=null is not a head count"):
            CheckpointFolder.open(folder)
    else:
        assert CheckpointFolder.open(folder).config["num_key_value_heads"] is None  # read as num_attention_heads
    check_prebuild({"model_type": model_type}, WHERE)  # no key: transformers' default for the family applies
