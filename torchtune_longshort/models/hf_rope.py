"""Hugging Face interop for scaled-RoPE models: the config.json entries of a RoPE spec, and back.

The checkpoint folder itself (weights, index, side file, tokenizer) is owned by
:mod:`torchtune_longshort.models.hf_checkpoint`; this module only maps a spec to config.json entries.

Which methods transformers can represent (5.23, ``modeling_rope_utils.ROPE_INIT_FUNCTIONS``):

=============  ==============================================================================================
linear         ``rope_type: linear``, ``factor``
dynamic_ntk    ``rope_type: dynamic``, ``factor``; transformers reads the *original* length from
               ``max_position_embeddings``, so that key holds L (not L') for this method
yarn           ``rope_type: yarn``, ``factor``, ``original_max_position_embeddings``, ``beta_fast`` (= our beta),
               ``beta_slow`` (= our alpha), ``truncate``, optional ``attention_factor``
llama3         ``rope_type: llama3``, ``factor``, ``low_freq_factor``, ``high_freq_factor``,
               ``original_max_position_embeddings``
ntk, abf       plain RoPE with another ``rope_theta`` (``base * factor^(d/(d-2))``, resp. ``new_base``):
               loads in transformers with identical frequencies
eabf, clex     not representable (EABF's query factor and CLEX's ODE are not in transformers): config.json
               gets ``rope_type: "longshort-<method> ..."``, which transformers refuses with that text
               (``KeyError``) instead of silently running ABF / plain RoPE (each class's
               ``transformers_representable``)
=============  ==============================================================================================

Every saved config.json also carries ``"longshort_rope"``: the exact spec (``model.rope_scaling``), which
:func:`rope_spec_from_hf_config` prefers, so every method round-trips. CLEX's learnable ODE parameters are stored
in a side file ``longshort_rope/rope_params.safetensors`` next to the weights (keys ``ode_up_proj``, ``ode_down_proj``),
keeping ``model.safetensors`` loadable by transformers.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, Dict, Optional, Union

import torch
from torch import nn

PathLike = Union[str, Path]
SPEC_KEY = "longshort_rope"
# In a subfolder: loaders that glob the checkpoint folder for *.safetensors must not take it for model weights.
ROPE_SIDE_FILE = "longshort_rope/rope_params.safetensors"
_NOT_KWARGS = ("method", "base", "max_seq_len", "head_dim", "original_max_seq_len")


def _spec_of(model_or_spec) -> Optional[Dict[str, Any]]:
    if isinstance(model_or_spec, nn.Module):
        return getattr(model_or_spec, "rope_scaling", None)
    if model_or_spec is None or isinstance(model_or_spec, dict):
        return model_or_spec
    raise TypeError(f"expected a model with .rope_scaling or a spec dict, got {type(model_or_spec).__name__}")


def rope_scaling_to_hf(model_or_spec) -> Optional[Dict[str, Any]]:
    """The transformers ``rope_scaling`` dict for a scaled model (or its spec); None where transformers has no
    scaling type for the method (plain, ntk and abf are a ``rope_theta`` change; eabf and clex are not
    representable -- see :func:`hf_config_updates` for the full set of config.json entries)."""
    spec = _spec_of(model_or_spec)
    if not spec:
        return None
    m = spec["method"]
    if m == "linear":
        return {"rope_type": "linear", "factor": float(spec["factor"])}
    if m == "dynamic_ntk":
        return {"rope_type": "dynamic", "factor": float(spec["factor"])}
    if m == "yarn":
        out = {
            "rope_type": "yarn",
            "factor": float(spec["factor"]),
            "original_max_position_embeddings": int(spec["original_max_seq_len"]),
            "beta_fast": float(spec.get("beta", 32.0)),
            "beta_slow": float(spec.get("alpha", 1.0)),
            "truncate": bool(spec.get("truncate", True)),
        }
        if spec.get("attention_factor") is not None:
            out["attention_factor"] = float(spec["attention_factor"])
        return out
    if m == "llama3":
        return {
            "rope_type": "llama3",
            "factor": float(spec["factor"]),
            "low_freq_factor": float(spec["low_freq_factor"]),
            "high_freq_factor": float(spec["high_freq_factor"]),
            "original_max_position_embeddings": int(spec["original_max_seq_len"]),
        }
    return None


def _hf_theta(spec: Dict[str, Any]) -> float:
    m = spec["method"]
    if m in ("abf", "eabf"):
        return float(spec["new_base"])
    if m == "ntk":
        if "head_dim" not in spec:
            raise ValueError("an ntk spec needs 'head_dim' to write its scaled base into config.json")
        d = spec["head_dim"]
        return float(spec["base"]) * float(spec["factor"]) ** (d / (d - 2))
    return float(spec["base"])


def transformers_representable(spec: Dict[str, Any]) -> bool:
    """Whether transformers runs ``spec``'s method from config.json alone (asks the method's class)."""
    from torchtune_longshort.rope import ROPE_METHODS

    cls = ROPE_METHODS.get(spec["method"])
    return bool(getattr(cls, "transformers_representable", True))


def not_representable_rope_type(method: str) -> str:
    """The ``rope_type`` written for a method transformers cannot run: transformers raises ``KeyError`` with this
    text when it builds the model, so ``lm-eval --model hf`` fails with the reason instead of a wrong model."""
    return f"longshort-{method} (not representable in transformers: evaluate with lm-eval --model longshort)"


def hf_config_updates(model_or_spec) -> Dict[str, Any]:
    """The config.json entries for a scaled model: ``rope_theta``, ``rope_parameters`` (transformers 5.x),
    ``rope_scaling`` (the 4.x name, when a scaling type applies), ``max_position_embeddings`` and our
    ``longshort_rope`` spec. Empty dict for an unscaled model."""
    spec = _spec_of(model_or_spec)
    if not spec:
        return {}
    theta = _hf_theta(spec)
    scaling = rope_scaling_to_hf(spec)
    if not transformers_representable(spec):
        scaling = {"rope_type": not_representable_rope_type(spec["method"])}
    params = {"rope_type": "default", "rope_theta": theta} if scaling is None else {**scaling, "rope_theta": theta}
    max_pos = spec["original_max_seq_len"] if spec["method"] == "dynamic_ntk" else spec["max_seq_len"]
    out = {
        "rope_theta": theta,
        "rope_parameters": params,
        "max_position_embeddings": int(max_pos),
        SPEC_KEY: copy.deepcopy(spec),
    }
    out["rope_scaling"] = scaling  # None clears a stale entry of the source config
    return out


def update_hf_config(config: Dict[str, Any], model_or_spec) -> Dict[str, Any]:
    """A copy of ``config`` (a parsed config.json) with the entries of :func:`hf_config_updates` applied."""
    new = copy.deepcopy(config)
    for k, v in hf_config_updates(model_or_spec).items():
        if v is None:
            new.pop(k, None)
        else:
            new[k] = v
    return new


def rope_spec_from_hf_config(config: Dict[str, Any]) -> Optional[Dict[str, Any]]:
    """Inverse of :func:`hf_config_updates`: the rope spec of a config.json, or None for plain RoPE.

    Our own ``longshort_rope`` key wins when present (exact round trip). Otherwise the transformers entry
    (``rope_scaling`` or ``rope_parameters``) is translated; ``max_seq_len`` is the length the scaling targets
    (``max_position_embeddings``; for ``dynamic``, L * factor). Unsupported types raise ``ValueError``.
    """
    if config.get(SPEC_KEY):
        return copy.deepcopy(config[SPEC_KEY])
    entry = config.get("rope_scaling") or config.get("rope_parameters") or {}
    kind = entry.get("rope_type") or entry.get("type") or "default"
    theta = float(entry.get("rope_theta") or config.get("rope_theta") or 10_000.0)
    max_pos = int(config.get("max_position_embeddings", 4096))
    if kind == "default":
        return None
    factor = float(entry["factor"])
    if kind == "linear":
        return {"method": "linear", "base": theta, "factor": factor, "max_seq_len": max_pos}
    if kind == "dynamic":
        return {
            "method": "dynamic_ntk",
            "base": theta,
            "factor": factor,
            "original_max_seq_len": max_pos,
            "max_seq_len": int(round(max_pos * factor)),
        }
    if kind == "yarn":
        if entry.get("mscale") or entry.get("mscale_all_dim"):
            raise ValueError("yarn rope_scaling with mscale/mscale_all_dim (DeepSeek form) is not supported")
        spec = {
            "method": "yarn",
            "base": theta,
            "factor": factor,
            "original_max_seq_len": int(entry.get("original_max_position_embeddings", max_pos)),
            "alpha": float(entry.get("beta_slow") or 1.0),
            "beta": float(entry.get("beta_fast") or 32.0),
            "truncate": bool(entry.get("truncate", True)),
            "max_seq_len": max_pos,
        }
        if entry.get("attention_factor") is not None:
            spec["attention_factor"] = float(entry["attention_factor"])
        return spec
    if kind == "llama3":
        return {
            "method": "llama3",
            "base": theta,
            "factor": factor,
            "low_freq_factor": float(entry["low_freq_factor"]),
            "high_freq_factor": float(entry["high_freq_factor"]),
            "original_max_seq_len": int(entry["original_max_position_embeddings"]),
            "max_seq_len": max_pos,
        }
    raise ValueError(
        f"config.json rope type {kind!r} is not supported: expected one of default, linear, dynamic, yarn, llama3 "
        f"(or a '{SPEC_KEY}' entry written by torchtune_longshort)"
    )


def usable_length_of(config: Dict[str, Any], spec: Optional[Dict[str, Any]]) -> int:
    """Positions a checkpoint covers: ``max_position_embeddings`` for plain RoPE; for a scaled one the spec's
    ``max_seq_len`` (the length the scaling targets), else its pre-trained length times ``factor``."""
    native = int(config.get("max_position_embeddings", 4096))
    if not spec:
        return native
    if spec.get("max_seq_len"):
        return int(spec["max_seq_len"])
    original = int(spec.get("original_max_seq_len") or native)
    return int(round(original * float(spec.get("factor", 1.0))))


def rope_state_dict(model: nn.Module) -> Dict[str, torch.Tensor]:
    """The learnable RoPE parameters (CLEX's ODE weights), once, keyed by their name inside the RoPE module."""
    from torchtune_longshort.models.rope_scaling import rope_attention_layers

    rope = rope_attention_layers(model)[0][1].pos_embeddings
    return {k: v.detach() for k, v in rope.state_dict().items()}


def split_rope_state_dict(state_dict: Dict[str, torch.Tensor]):
    """Split a torchtune state dict into (model weights, RoPE parameters).

    torchtune's ``convert_weights.tune_to_hf`` rejects unknown keys such as
    ``layers.0.attn.pos_embeddings.ode_up_proj``; the RoPE module is shared by all layers, so its parameters
    appear once per layer and are returned once, keyed by their name inside the module.
    """
    model_sd, rope_sd = {}, {}
    for k, v in state_dict.items():
        if ".pos_embeddings." in k:
            rope_sd.setdefault(k.split(".pos_embeddings.", 1)[1], v)
        else:
            model_sd[k] = v
    return model_sd, rope_sd


def check_hf_config_consistent(config: Dict[str, Any], where: str = "config.json") -> None:
    """Refuse a config.json whose transformers RoPE entries disagree with its ``longshort_rope`` spec (a hand edit
    of one but not the other): the two loaders would then run different models from one folder."""
    spec = config.get(SPEC_KEY)
    if not spec:
        return
    want = hf_config_updates(spec)
    for key in ("rope_theta", "rope_scaling", "rope_parameters"):
        have = config.get(key)
        expected = want.get(key)
        if key == "rope_parameters" and have is not None and expected is not None:
            same = _same_entry(have, expected)
        elif key == "rope_theta":
            same = have is None or expected is None or abs(float(have) - float(expected)) <= 1e-6 * float(expected)
        else:
            same = _same_entry(have or {}, expected or {})
        if not same:
            raise ValueError(
                f"{where}: {key}={have!r} disagrees with its '{SPEC_KEY}' spec {spec!r} (which implies "
                f"{key}={expected!r}); the folder would load differently in transformers and torchtune_longshort. "
                f"Re-save it with save_hf_checkpoint, or fix one of the two entries"
            )


def _same_entry(a: Dict[str, Any], b: Dict[str, Any]) -> bool:
    if set(a) != set(b):
        return False
    for k, v in a.items():
        w = b[k]
        if isinstance(v, (int, float)) and isinstance(w, (int, float)) and not isinstance(v, bool):
            if abs(float(v) - float(w)) > 1e-6 * max(1.0, abs(float(w))):
                return False
        elif v != w:
            return False
    return True
