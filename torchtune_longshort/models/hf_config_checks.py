"""The value checks of a checkpoint folder's ``config.json`` that run when the folder is opened
(:meth:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder.open`): a head that is no causal LM, a RoPE base
that is no number > 1, a ``max_position_embeddings`` that is no count of positions, an ``rms_norm_eps`` that is no
number, a count or flag of a type the folder's transformers config class refuses (``hidden_size: 8.5``, a null
``num_key_value_heads`` where the class refuses one) or below 1, a file that is no JSON object or whose model_type is no
string. Each refuses naming the file (``where``) and the key, instead of a failure deep in torchtune's conversion or
an evaluation that scores nothing."""

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
    both) raised int()'s OverflowError / ValueError, naming no file. 4096.0 is a count here (the folder's config
    class refuses it first where it does: :func:`check_field_types`). An explicit null is no
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


# The counts and the flag the families' builders read from config.json, each checked by the field type of the
# folder's own transformers config class (its strict dataclass's huggingface_hub ``type_validator``).
TYPED_KEYS = ("vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
              "num_key_value_heads", "head_dim", "max_position_embeddings", "tie_word_embeddings")


def _class_refusal(config: Dict[str, Any], key: str) -> str:
    """What the transformers config class of ``config``'s model_type says of ``config[key]`` ("" where it takes it,
    has no such field, or transformers does not know the model_type)."""
    from huggingface_hub.dataclasses import type_validator
    from transformers import CONFIG_MAPPING  # only for a folder with a value that is no plain int / bool

    mt = config.get("model_type")
    cls = CONFIG_MAPPING[mt] if isinstance(mt, str) and mt in CONFIG_MAPPING else None
    if cls is None:
        return ""
    field = getattr(cls, "__dataclass_fields__", {}).get(key)
    # a key the class reads without a field of its own (Qwen2Config's, Phi3Config's head_dim): a count or null
    kind = field.type if field is not None else bool if key == "tie_word_embeddings" else int | None
    try:
        type_validator(key, config[key], kind)
    except (TypeError, ValueError):
        expected = getattr(kind, "__name__", str(kind))  # int, or a union: "int | None"
        who = f"{cls.__name__} refuses it" if field is not None else f"{cls.__name__}'s model reads it"
        return f"{who}: expected {expected}, got {type(config[key]).__name__}"
    return ""


def check_field_types(config: Dict[str, Any], where: Path) -> None:
    """Each of :data:`TYPED_KEYS` that ``config.json`` writes is refused where the folder's transformers config class
    refuses its value (``hidden_size: 8.5``, ``num_attention_heads: "9"``, ``vocab_size: null``,
    ``tie_word_embeddings: "false"``, ``max_position_embeddings: 1e9``: "expected int, got float"), asked of that
    class's own field type; the builders' int() / bool() had read 8.5 as 8 and "false" as true, or raised a traceback.
    An explicit ``num_key_value_heads: null`` is refused where the class refuses one (MistralConfig, GemmaConfig);
    LlamaConfig, Qwen2Config and Phi3Config read it as ``num_attention_heads``. A count below 1
    (``intermediate_size: -1``), which the class takes but no model builds, is refused too. A missing key, or a
    model_type transformers does not know, is no refusal."""
    for key in (k for k in TYPED_KEYS if k in config):
        value = config[key]
        plain = type(value) is (bool if key == "tie_word_embeddings" else int)
        why = "" if plain else _class_refusal(config, key)
        shown = "null" if value is None else repr(value)
        if why and key == "num_key_value_heads" and value is None:
            raise ValueError(f"{where}: num_key_value_heads=null is not a head count ({why}): set the model's "
                             "key/value heads (num_attention_heads without grouped-query attention), or put back "
                             "the config.json written with these weights")
        if why:
            what = {"tie_word_embeddings": "true or false (json's false, not a string)",
                    "max_position_embeddings": "a count of positions (an integer >= 1: 4096 for Llama-2)"}.get(
                key, "an integer")
            raise ValueError(f"{where}: {key}={shown} is not {what} ({why}): put back the config.json written "
                             "with these weights")
        if plain and key != "tie_word_embeddings" and value < 1:
            raise ValueError(f"{where}: {key}={value} is not a count (an integer >= 1): no model has it; put back "
                             "the config.json written with these weights")


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
    :func:`check_rms_norm_eps`, :func:`check_field_types`."""
    check_causal_lm(config, where)
    check_rms_norm_eps(config, where)
    check_field_types(config, where)
