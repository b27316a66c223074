"""A config.json's counts and flag of the wrong type (hand-edited, foreign): refused when the folder is opened where the
folder's own transformers config class refuses the same dict, taken where it takes it (``models/hf_config_checks``'s
``check_field_types``); a count below 1, which no layer has, is refused too."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from torchtune_longshort.models.hf_config_checks import check_prebuild

WHERE = Path("m/config.json")
BASE = dict(hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16, vocab_size=128,
            intermediate_size=128, num_hidden_layers=2, max_position_embeddings=256, tie_word_embeddings=False)
EDITS = [("head_dim", "x"), ("head_dim", 8.5), ("hidden_size", 8.5), ("hidden_size", 64.0),
         ("num_attention_heads", "4"), ("num_hidden_layers", 2.0), ("vocab_size", None), ("vocab_size", True),
         ("intermediate_size", "128"), ("tie_word_embeddings", "false"), ("tie_word_embeddings", 0),
         ("max_position_embeddings", 1e9), ("max_position_embeddings", 256.0), ("num_key_value_heads", None),
         ("head_dim", None), ("hidden_size", 64)]


def _transformers_refuses(model_type: str, config: dict, key: str) -> bool:
    """transformers' config class of ``model_type`` refuses ``config``; for a key it has no field for (Qwen2Config's,
    Phi3Config's head_dim, which their models read as a head size), whether torch would build a layer of it."""
    import torch
    from transformers import CONFIG_MAPPING

    if key not in CONFIG_MAPPING[model_type].__dataclass_fields__ and config[key] is not None:
        try:
            torch.nn.Linear(4, config[key] * 2, device="meta")
        except TypeError:
            return True
    try:
        CONFIG_MAPPING[model_type].from_dict(config)
    except Exception:  # huggingface_hub's StrictDataclassFieldValidationError (a TypeError / ValueError)
        return True
    return False


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "gemma", "phi3"])
def test_a_value_of_the_wrong_type_is_refused_where_transformers_config_class_refuses_it(model_type):
    """hidden_size 8.5 had been built as int(8.5) = 8, "false" read as bool("false") = True, a null vocab_size raised
    int()'s TypeError as a traceback: each now refused naming the key, exactly where transformers' class refuses."""
    for key, value in EDITS:
        config = {**BASE, "model_type": model_type, key: value}
        if _transformers_refuses(model_type, config, key):
            with pytest.raises(ValueError, match=rf"^m/config.json: {key}=\S+ is not "):
                check_prebuild(config, WHERE)
        else:
            check_prebuild(config, WHERE)


@pytest.mark.parametrize("key", ["intermediate_size", "num_hidden_layers", "hidden_size", "vocab_size"])
def test_a_count_below_one_is_refused_as_torch_cannot_build_it(key):
    """intermediate_size -1 passes transformers' class (an int) but no layer has -1 features: torch refuses it; it was
    a RuntimeError traceback from the builder. 0 layers left every weight unused."""
    import torch

    with pytest.raises(RuntimeError):
        torch.nn.Linear(4, -1)
    for value in (-1, 0):
        with pytest.raises(ValueError, match=rf"^m/config.json: {key}={value} is not a count \(an integer >= 1\)"):
            check_prebuild({**BASE, "model_type": "llama", key: value}, WHERE)
    check_prebuild({**BASE, "model_type": "llama", key: 1}, WHERE)


def test_the_folder_is_refused_when_opened(tmp_path, tiny_llama2_dir):
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_llama2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    config["hidden_size"] = float(config["hidden_size"]) + 0.5
    assert _transformers_refuses("llama", config, "hidden_size")
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"config.json: hidden_size=\S+ is not an integer \(LlamaConfig refuses it"):
        CheckpointFolder.open(folder)


@pytest.mark.parametrize("model_type", ["llama", "mistral", "gemma"])
def test_a_fractional_key_value_head_count_is_named_as_given_not_as_null(model_type):
    """num_key_value_heads 2.5 is refused naming 2.5 (the null's own wording is for a null only)."""
    config = {**BASE, "model_type": model_type, "num_key_value_heads": 2.5}
    assert _transformers_refuses(model_type, config, "num_key_value_heads")
    with pytest.raises(ValueError, match=r"^m/config.json: num_key_value_heads=2.5 is not an integer "):
        check_prebuild(config, WHERE)
