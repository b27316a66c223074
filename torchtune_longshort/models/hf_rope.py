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
longrope       ``rope_type: longrope``, ``short_factor``, ``long_factor``, ``factor``, optional
               ``attention_factor``, ``original_max_position_embeddings`` (also at the top level of config.json,
               where transformers' Phi3Config reads it); read from a hub config.json as Phi-3.5-mini ships it
               (``rope_scaling: {type: longrope, short_factor, long_factor}``, no ``factor``: s is then
               ``max_position_embeddings / original_max_position_embeddings``)
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
from pathlib import Path
from typing import Any, Dict, Optional, Sequence, Tuple, Union

import torch
from torch import nn

from torchtune_longshort.models.family_builders import partial_rotary_factor, rope_entry, rope_theta
from torchtune_longshort.models.families import hf_default_positions
from torchtune_longshort.models.rope_scaling import rope_attention_layers
from torchtune_longshort.rope import ROPE_METHODS, build_rope, check_rope_method
from torchtune_longshort.rope.checkpoint_code import check_checkpoint_path

PathLike = Union[str, Path]
SPEC_KEY = "longshort_rope"
# In a subfolder: loaders that glob the checkpoint folder for *.safetensors must not take it for model weights.
ROPE_SIDE_FILE = "longshort_rope/rope_params.safetensors"
# Spec entries that describe the model rather than the method: not passed to the method class as kwargs.
SPEC_CONTEXT_KEYS = ("method", "base", "max_seq_len", "head_dim", "original_max_seq_len")
# The positions of a config.json that names neither max_position_embeddings nor a family's model_type (whose
# transformers config class gives the default): what every reader of a checkpoint folder takes, via native_positions.
DEFAULT_POSITIONS = 4096


def native_positions(config: Dict[str, Any]) -> int:
    """The positions a config.json's plain (unscaled) RoPE covers: ``max_position_embeddings``, else the default of
    transformers' config class for its family's ``model_type`` (:func:`~torchtune_longshort.models.families.
    hf_default_positions`, as ``AutoConfig`` reads the folder), else :data:`DEFAULT_POSITIONS`."""
    if "max_position_embeddings" not in config:
        return hf_default_positions(config) or DEFAULT_POSITIONS
    return int(config["max_position_embeddings"])


def _spec_of(model_or_spec) -> Optional[Dict[str, Any]]:
    if isinstance(model_or_spec, nn.Module):
        return getattr(model_or_spec, "rope_scaling", None)
    if model_or_spec is None or isinstance(model_or_spec, dict):
        return model_or_spec
    raise TypeError(f"expected a model with .rope_scaling or a spec dict, got {type(model_or_spec).__name__}")


def _method_class(spec: Dict[str, Any], where: str = ""):
    """The class of ``spec``'s method; a refusal names ``where`` (the file that holds the spec) before its key."""
    return ROPE_METHODS[check_rope_method(spec["method"], f"{where}: {SPEC_KEY}.method" if where else
                                          f"{SPEC_KEY}.method")]


def rope_scaling_to_hf(model_or_spec) -> Optional[Dict[str, Any]]:
    """The transformers ``rope_scaling`` dict for a scaled model (or its spec); None where transformers has no
    scaling type for the method (plain, ntk and abf are a ``rope_theta`` change; eabf and clex are not
    representable -- see :func:`hf_config_updates`). Asks the method's class (``ScaledRoPE.to_hf``)."""
    spec = _spec_of(model_or_spec)
    if not spec:
        return None
    return _method_class(spec).to_hf(spec)


def transformers_representable(spec: Dict[str, Any], hf_rope_types: Optional[Sequence[str]] = None) -> bool:
    """Whether transformers runs ``spec``'s method from config.json alone: the method's class says so, and its
    transformers rope type is one the model family's transformers config accepts (``hf_rope_types``, the family's;
    None: any)."""
    cls = ROPE_METHODS.get(spec["method"])
    if not getattr(cls, "transformers_representable", True):
        return False
    scaling = cls.to_hf(spec) if cls is not None else None
    return scaling is None or hf_rope_types is None or scaling["rope_type"] in hf_rope_types


_NOT_REPRESENTABLE = "longshort-"  # the rope_type prefix of a method transformers cannot run


def not_representable_rope_type(method: str) -> str:
    """The ``rope_type`` written for a method transformers cannot run: transformers raises ``KeyError`` with this
    text when it builds the model, so ``lm-eval --model hf`` fails with the reason instead of a wrong model."""
    return (f"{_NOT_REPRESENTABLE}{method} (not representable in transformers: evaluate with longshort-eval --model "
            "longshort)")


def not_representable_method(config: Dict[str, Any]) -> Optional[str]:
    """The RoPE method of a ``config.json`` (a dict) that transformers cannot run (its ``rope_type`` written by
    :func:`not_representable_rope_type`), else None."""
    types = [(config.get(key) or {}).get("rope_type") for key in ("rope_scaling", "rope_parameters")]
    marked = [t for t in types if isinstance(t, str) and t.startswith(_NOT_REPRESENTABLE)]
    if not marked:
        return None
    return (config.get(SPEC_KEY) or {}).get("method") or marked[0][len(_NOT_REPRESENTABLE):].split(" ")[0]


def hf_config_updates(model_or_spec, hf_rope_types: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The config.json entries for a scaled model: ``rope_theta``, ``rope_parameters`` (transformers 5.x),
    ``rope_scaling`` (the 4.x name, when a scaling type applies), ``max_position_embeddings`` and our
    ``longshort_rope`` spec. Empty dict for an unscaled model. ``hf_rope_types``: the rope types the model family's
    transformers config accepts (``families.ModelFamily.hf_rope_types``); another one is written as not
    representable."""
    spec = _spec_of(model_or_spec)
    if not spec:
        return {}
    cls = _method_class(spec)
    theta = cls.hf_theta(spec)
    scaling = cls.to_hf(spec)
    if not transformers_representable(spec, hf_rope_types):
        scaling = {"rope_type": not_representable_rope_type(spec["method"])}
    params = {"rope_type": "default", "rope_theta": theta} if scaling is None else {**scaling, "rope_theta": theta}
    max_pos = cls.hf_max_position_embeddings(spec)
    out = {
        "rope_theta": theta,
        "rope_parameters": params,
        "max_position_embeddings": int(max_pos),
        **{k: scaling[k] for k in cls.hf_top_level_keys if scaling and k in scaling},
        SPEC_KEY: copy.deepcopy(spec),
    }
    out["rope_scaling"] = scaling  # None clears a stale entry of the source config
    return out


def update_hf_config(config: Dict[str, Any], model_or_spec,
                     hf_rope_types: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """A copy of ``config`` (a parsed config.json) with the entries of :func:`hf_config_updates` applied."""
    new = copy.deepcopy(config)
    for k, v in hf_config_updates(model_or_spec, hf_rope_types).items():
        if v is None:
            new.pop(k, None)
        else:
            new[k] = v
    return new


def saved_hf_config(config: Dict[str, Any], rope_spec: Optional[Dict[str, Any]],
                    hf_rope_types: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The config.json a checkpoint of a model with ``rope_spec`` (None: plain RoPE) is saved with: ``config`` with
    :func:`update_hf_config` applied, and for plain RoPE no scaling entry left from ``config``."""
    new = update_hf_config(config, rope_spec, hf_rope_types)
    if not rope_spec:
        for k in (SPEC_KEY, "rope_scaling"):
            new.pop(k, None)
    return new


def rope_of_config(config: Dict[str, Any], where: str = "config.json") -> Tuple[Optional[Dict[str, Any]], float]:
    """``(spec, base)``: the RoPE a config.json makes, comparable between two folders (a LoRA adapter's base and its
    step): transformers' reading of ``rope_scaling`` / ``rope_parameters`` (our spec key spells defaults out or
    leaves them to the method, so two spellings of one RoPE differed), our spec key only for a method transformers
    cannot run (CLEX); without ``max_seq_len``, ``head_dim`` and ``layout``, which size caches and name the weights'
    layout (a run that kept Llama 3's scaling at its own length trains the same RoPE; where transformers reads a
    length, dynamic NTK's, the spec holds it as ``original_max_seq_len``). Raises as
    :func:`rope_spec_from_hf_config` (``ValueError``), or ``KeyError`` / ``TypeError`` for a malformed config."""
    try:
        spec = rope_spec_from_hf_config({k: v for k, v in config.items() if k != SPEC_KEY})
    except ValueError:
        if not config.get(SPEC_KEY):
            raise
        spec = rope_spec_from_hf_config(config, where)
    spec = spec and {k: v for k, v in spec.items() if k not in ("max_seq_len", "head_dim", "layout")}
    return spec, float(rope_theta(config))


def rope_spec_from_hf_config(config: Dict[str, Any], where: str = "config.json") -> Optional[Dict[str, Any]]:
    """Inverse of :func:`hf_config_updates`: the rope spec of a config.json, or None for plain RoPE.

    Our own ``longshort_rope`` key wins when present (exact round trip). Otherwise the transformers entry
    (``rope_scaling`` or ``rope_parameters``) is translated; ``max_seq_len`` is the length the scaling targets
    (``max_position_embeddings``; for ``dynamic``, L * factor). A top-level key the method names in
    ``hf_top_level_keys`` wins over the entry's, as in transformers (Phi-3 keeps ``original_max_position_embeddings``
    there). Unsupported types, and a spec its method cannot build for the config's head size (``check_spec``),
    raise ``ValueError`` starting with ``where``.
    """
    if config.get(SPEC_KEY):
        spec = copy.deepcopy(config[SPEC_KEY])
        check_checkpoint_path(spec.get("method"), ROPE_METHODS, where, f"{SPEC_KEY}.method")  # someone's: asked
        cls = ROPE_METHODS[check_rope_method(spec.get("method"), f"{where}: {SPEC_KEY}.method")]
        cls.check_spec(spec, _rotary_dim(config), f"{where}: {SPEC_KEY}")
        return spec
    key, entry = rope_entry(config)
    entry = dict(entry or {})
    kind = entry.get("rope_type") or entry.get("type") or "default"
    theta = rope_theta(config)
    max_pos = native_positions(config)
    if kind == "default":
        return None
    by_hf_type = {t: c for c in ROPE_METHODS.values() if c.hf_rope_type for t in (c.hf_rope_type,
                                                                                   *c.hf_rope_type_aliases)}
    if kind not in by_hf_type:
        raise ValueError(
            f"{where}: rope type {kind!r} is not supported: expected one of default, "
            f"{', '.join(sorted(by_hf_type))} (or a '{SPEC_KEY}' entry written by torchtune_longshort)"
        )
    cls = by_hf_type[kind]
    entry.update({k: config[k] for k in cls.hf_top_level_keys if config.get(k) is not None})
    cls.check_spec(entry, _rotary_dim(config), f"{where}: {key}")
    try:
        spec = cls.from_hf(entry, theta, max_pos)
        _trial_build(spec, _rotary_dim(config))
    except KeyError as err:
        raise ValueError(f"{where}: {key} of rope type {kind!r} has no {err.args[0]!r} (transformers' {kind!r} "
                         "needs it too); add it, or remove the entry for plain RoPE") from None
    except (TypeError, ValueError) as err:
        raise ValueError(f"{where}: {key} (rope type {kind!r}, max_position_embeddings {max_pos}): {err}") from None
    return spec


def _trial_build(spec: Dict[str, Any], head_dim: int) -> None:
    """Build ``spec``'s RoPE module on the meta device (no memory), so that a value its method refuses is refused
    here, where the message can name the config.json entry it came from."""
    length = spec["max_seq_len"]
    kwargs = ROPE_METHODS[spec["method"]].default_kwargs(length, spec.get("original_max_seq_len") or length, {
        k: v for k, v in spec.items() if k not in SPEC_CONTEXT_KEYS})
    with torch.device("meta"):
        build_rope(spec["method"], head_dim=head_dim, max_seq_len=length, base=spec["base"], **kwargs)


def _rotary_dim(config: Dict[str, Any]) -> int:
    """The rotated part of a head, as transformers computes it: ``head_dim`` (else hidden / heads) times
    ``partial_rotary_factor``."""
    head_dim = config.get("head_dim") or int(config.get("hidden_size", 0)) // max(1, int(config.get(
        "num_attention_heads", 1)))
    return int(head_dim * partial_rotary_factor(config))


def usable_length_of(config: Dict[str, Any], spec: Optional[Dict[str, Any]]) -> int:
    """Positions a checkpoint covers: ``max_position_embeddings`` for plain RoPE; for a scaled one the spec's
    ``max_seq_len`` (the length the scaling targets), else its pre-trained length times ``factor``."""
    native = native_positions(config)
    if not spec:
        return native
    if spec.get("max_seq_len"):
        return int(spec["max_seq_len"])
    original = int(spec.get("original_max_seq_len") or native)
    return int(round(original * float(spec.get("factor", 1.0))))


def rope_state_dict(model: nn.Module) -> Dict[str, torch.Tensor]:
    """The learnable RoPE parameters (CLEX's ODE weights), once, keyed by their name inside the RoPE module."""
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


def check_hf_config_consistent(config: Dict[str, Any], where: str = "config.json",
                               hf_rope_types: Optional[Sequence[str]] = None) -> None:
    """Refuse a config.json whose transformers RoPE entries disagree with its ``longshort_rope`` spec (a hand edit
    of one but not the other): the two loaders would then run different models from one folder."""
    spec = config.get(SPEC_KEY)
    if not spec:
        return
    cls = _method_class(spec, where)  # a method of one's own that does not import here: the folder's file named
    want = hf_config_updates(spec, hf_rope_types)
    top_level = tuple(k for k in cls.hf_top_level_keys if k in want)
    for key in ("rope_theta", "rope_scaling", "rope_parameters", *top_level):
        have = config.get(key)
        expected = want.get(key)
        if key == "rope_parameters" and have is not None and expected is not None:
            same = _same_entry(have, expected)
        elif key in top_level:
            same = have is not None and _same_entry({key: have}, {key: expected})
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
