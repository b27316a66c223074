"""The value checks of a checkpoint folder's ``config.json`` that run when the folder is opened
(:meth:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder.open`): a head that is no causal LM, a RoPE base
that is no number > 1, a ``max_position_embeddings`` that is no count of positions, an ``rms_norm_eps`` that is no
number, a null ``num_key_value_heads`` where the family's transformers config class refuses one, a file that is no
JSON object or whose model_type is no string. Each refuses naming the file (``where``) and the key, instead of a failure deep in torchtune's conversion or an evaluation that scores nothing."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict

from torchtune_longshort.models.family_builders import rope_theta_entry
from torchtune_longshort.rope.checks import check_base


def check_causal_lm(config: Dict[str, Any], where: Path) -> None:
    """A folder whose ``architectures`` name no causal LM (a classifier's ``score`` head, an encoder) is refused
    when opened, not at a weight key deep in torchtune's conversion."""
    arch = config.get("architectures")
    if isinstance(arch, list) and arch and all(isinstance(a, str) for a in arch) \
            and not any(a.endswith("ForCausalLM") for a in arch):
        raise ValueError(f"{where}: architectures {arch} is not a causal language model (...ForCausalLM): this "
                         "folder holds another head over the model; name a causal-LM checkpoint")


def check_rope_base(config: Dict[str, Any], where: Path) -> None:
    """A RoPE base that is no number > 1 (``rope_theta: -1``) is refused when the folder is opened, naming the key
    that holds it (``rope_theta``, or inside ``rope_parameters`` / ``rope_scaling``): its frequencies were NaN, and
    an evaluation scored nothing and exited 0 ("no reason recorded"). Checked as a RoPE method checks its own
    (:func:`~torchtune_longshort.rope.checks.check_base`)."""
    key, given = rope_theta_entry(config)
    try:
        check_base(key, float(given))
    except (TypeError, ValueError):
        raise ValueError(f"{where}: {key}={given!r} is not a RoPE base (a number > 1: 10000 for Llama-2, 500000 for "
                         "Llama-3): put back the config.json written with these weights") from None


def check_max_position_embeddings(config: Dict[str, Any], where: Path) -> None:
    """A ``max_position_embeddings`` that is no count of positions is refused when the folder is opened: it was
    refused as the eval model's own argument ("max_seq_len=0 must be an int >= 1"), and Infinity / NaN (json reads
    both) raised int()'s OverflowError / ValueError, naming no file. 4096.0 is a count too. An explicit null is no
    count either (transformers' config class refuses it: "expected int, got NoneType"); it raised int()'s TypeError
    as a traceback. A missing key is no refusal: transformers' default for the family applies."""
    if "max_position_embeddings" not in config:
        return
    positions = config["max_position_embeddings"]
    if positions is None or isinstance(positions, bool) or not isinstance(positions, (int, float)) \
            or not float(positions).is_integer() or positions < 1:
        shown = "null" if positions is None else repr(positions)
        raise ValueError(f"{where}: max_position_embeddings={shown} is not a count of positions (an integer "
                         ">= 1: 4096 for Llama-2): put back the config.json written with these weights")


def check_rms_norm_eps(config: Dict[str, Any], where: Path) -> None:
    """An ``rms_norm_eps`` that is no finite number is refused when the folder is opened: an explicit null raised
    float()'s TypeError as a traceback in the family's builder (transformers' config class refuses it: "expected
    float, got NoneType"), a string was read by float() where transformers refuses it, and Infinity / NaN (json reads
    both) made every norm's output 0 / NaN. A missing key is no refusal: transformers' default for the family
    applies."""
    if "rms_norm_eps" not in config:
        return
    eps = config["rms_norm_eps"]
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not math.isfinite(eps):
        shown = "null" if eps is None else repr(eps)
        raise ValueError(f"{where}: rms_norm_eps={shown} is not a norm epsilon (a small number: 1e-05 for Llama-2, "
                         "1e-06 for Qwen2): put back the config.json written with these weights")


def check_kv_heads(config: Dict[str, Any], where: Path) -> None:
    """An explicit ``"num_key_value_heads": null`` is refused where the folder's transformers config class refuses it
    (MistralConfig, GemmaConfig: "expected int, got NoneType"), asked of that class's own field type with the
    validator its strict dataclass runs (huggingface_hub's ``type_validator``); it was read as
    ``num_attention_heads``, a model transformers would not load. Where the class takes a null (LlamaConfig,
    Qwen2Config, Phi3Config: ``num_attention_heads``), or transformers does not know the model_type, it is no
    refusal."""
    if "num_key_value_heads" not in config or config["num_key_value_heads"] is not None:
        return
    from huggingface_hub.dataclasses import type_validator
    from transformers import CONFIG_MAPPING  # only for a folder that writes the null

    mt = config.get("model_type")
    field = getattr(CONFIG_MAPPING[mt], "__dataclass_fields__", {}).get("num_key_value_heads") \
        if mt in CONFIG_MAPPING else None
    try:
        if field is not None:
            type_validator("num_key_value_heads", None, field.type)
    except (TypeError, ValueError):
        raise ValueError(f"{where}: num_key_value_heads=null is not a head count ({CONFIG_MAPPING[mt].__name__} "
                         "refuses it): set the model's key/value heads (num_attention_heads without grouped-query "
                         "attention), or put back the config.json written with these weights") from None


def check_model_type(config: Any, where: Path) -> Dict[str, Any]:
    """``config`` itself where it is a JSON object whose ``model_type`` (if any) is a string; refused else, naming
    the file: a list at the top (transformers: "Unrecognized model") or ``model_type: ["llama"]`` (transformers'
    lookup: "unhashable type") raised a traceback far from the file."""
    if not isinstance(config, dict):
        raise ValueError(f"{where}: holds a JSON {type(config).__name__}, not an object of the model's settings "
                         "({\"model_type\": ...}): put back the config.json written with these weights")
    mt = config.get("model_type")
    if mt is not None and not isinstance(mt, str):
        raise ValueError(f"{where}: model_type={mt!r} is not a model type name (a string: \"llama\", \"qwen2\"): "
                         "put back the config.json written with these weights")
    return config


def check_prebuild(config: Dict[str, Any], where: Path) -> None:
    """The checks asked before the folder's family is read (:func:`~.families.family_of` may build the model on the
    meta device, which reads the norm epsilon and the key/value heads): :func:`check_causal_lm`,
    :func:`check_rms_norm_eps`, :func:`check_kv_heads`."""
    check_causal_lm(config, where)
    check_rms_norm_eps(config, where)
    check_kv_heads(config, where)
