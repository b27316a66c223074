"""The checks of a ``rope_scaled`` model node (``torchtune_longshort.models.rope_scaled``), before anything is built:
the RoPE method's own arguments, the length the scaling starts from (an inner ``hf_decoder`` folder's positions, or
the length its own scaling started from), the factor, and the method's values built on the meta device. Each
refusal names the key under the node's config path (``model.factor``) and the fix; before, the RoPE classes refused
them once the run's setup had begun, naming the bare argument, and ``longshort-validate`` said OK."""

from __future__ import annotations

import difflib
import inspect
from pathlib import Path
from typing import Any, Mapping, Optional

import torch

from torchtune_longshort.config.values import resolve_component
from torchtune_longshort.models.families import family_named
from torchtune_longshort.models.family_builders import rope_theta
from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.models.folder_rope import scaling_start_of, scaling_start_past_checkpoint
from torchtune_longshort.models.rope_scaling import (apply_rope_scaling, check_scaling_target, rope_scaled,
                                                     scaling_start_refusal)
from torchtune_longshort.rope import ROPE_METHODS, build_rope, method_parameters
from torchtune_longshort.rope.checks import check_factor
from torchtune_longshort.training.recipe_config.key_homes import wrapped_home

HF_DECODER = "torchtune_longshort.models.hf_decoder"
ROPE_SCALED = "torchtune_longshort.models.rope_scaled"


def check_rope_node(path: str, node: Mapping[str, Any]) -> None:
    """Every check of this module on the model node ``node`` at config path ``path`` (nothing for another node)."""
    _check_rope_arguments(path, node)
    _check_scaling_start(path, node)
    _check_factor(path, node)
    _check_rope_values(path, node)


def _refuse_rope_arguments(where: str, method: str, given: Mapping[str, Any], node: Mapping[str, Any],
                           own: Optional[set] = None) -> None:
    """The first of ``given`` (the node's keys that are not ``rope_scaled``'s ``own``) that ``method`` does not
    take, refused; the error's ``refused`` (keys, what the node takes, ``where``) lets the caller that knows the
    whole config name a key's home elsewhere (``train_embeddings_and_norms``: a top-level key)."""
    accepted = method_parameters(method)
    unknown = [k for k in given if accepted is not None and k not in accepted]
    if unknown:
        k = unknown[0]
        near, home = difflib.get_close_matches(str(k), accepted, n=1), wrapped_home(node, where, str(k))
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        if home is not None:  # lora_rank on the wrapper: the model it wraps takes it
            inner = home.rsplit(".", 1)[0]
            hint = (f" (did you mean {home!r}? the model it wraps takes it"
                    f"{f': LoRA keys go under {inner}' if 'lora' in str(k) else ''})")
        err = ValueError(f"{where}.{k}={given[k]!r} is not an argument of RoPE method {method!r}{hint}: it takes "
                         f"{accepted}")
        if not near and home is None:
            err.refused = ([k], sorted({*accepted, *(own or ()), "_component_"}), where)
        raise err


def _check_rope_arguments(path: str, node: Mapping[str, Any]) -> None:
    """A RoPE method's own arguments, by its class's signature, before anything is built: ``rope_scaled``'s extra
    keys (besides its own and ``apply_rope_scaling``'s)."""
    if resolve_component(f"{path}._component_", node["_component_"]) is not rope_scaled:
        return
    own = {n for f in (rope_scaled, apply_rope_scaling) for n, p in inspect.signature(f).parameters.items()
           if p.kind is not inspect.Parameter.VAR_KEYWORD}
    if node.get("method") in ROPE_METHODS:
        _refuse_rope_arguments(path, node["method"], {k: v for k, v in node.items()
                                                     if k != "_component_" and k not in own}, node, own)


def _check_scaling_start(path: str, node: Mapping[str, Any]) -> None:
    """``rope_scaled`` over an ``hf_decoder`` folder: the inner ``max_seq_len`` is the length the scaling starts
    from (``apply_rope_scaling`` takes the built model's positions as ``original_max_seq_len``), so one past the
    folder's own length scales from positions the checkpoint never saw (at the target: factor 1, no scaling). The
    rule is the models' (``scaling_start_past_checkpoint``, which ``hf_decoder`` asks too); this names the keys."""
    inner = node.get("model")
    if (node["_component_"] != ROPE_SCALED or not isinstance(inner, Mapping) or inner.get("_component_") != HF_DECODER
            or not inner.get("checkpoint_dir") or not isinstance(inner.get("max_seq_len"), int)
            or node.get("original_max_seq_len") is not None or not Path(str(inner["checkpoint_dir"])).is_dir()):
        return  # (a folder not there yet, as a study's runs' base, is left to the folder checks)
    # (a shorter start, as a study's quick run of a long base, is a choice: allowed)
    trained = scaling_start_past_checkpoint(inner["checkpoint_dir"], inner["max_seq_len"],
                                            bool(inner.get("plain_rope")))
    if trained is not None:
        raise scaling_start_refusal(node.get("method"), inner["max_seq_len"], node.get("max_seq_len"), trained,
                                    start_field=f"{path}.model.max_seq_len", target_field=f"{path}.max_seq_len",
                                    other_start=f"set {path}.original_max_seq_len")


def scaling_start_of_node(node: Mapping[str, Any]) -> Optional[int]:
    """The length ``rope_scaled`` scales from, where its node says it: ``original_max_seq_len``, the inner node's
    ``max_seq_len`` (an inner ``hf_decoder`` folder's: as the models say, ``scaling_start_of``), its folder's
    positions (plain RoPE there), or the length its own scaling started from (``apply_rope_scaling`` replaces a
    folder's scaling from there, whatever ``max_seq_len`` it was built at); None otherwise."""
    inner = node.get("model")
    if isinstance(node.get("original_max_seq_len"), int) or not isinstance(inner, Mapping):
        return node.get("original_max_seq_len")
    given = inner.get("max_seq_len")
    if inner.get("_component_") == HF_DECODER and inner.get("family") is not None:
        # a family of one's own reads the folder: imported (kept) before it is opened, as hf_decoder does
        family_named(inner["family"], "model.model.family")
    if inner.get("_component_") == HF_DECODER and inner.get("checkpoint_dir") \
            and Path(str(inner["checkpoint_dir"])).is_dir() and (given is None or isinstance(given, int)):
        return scaling_start_of(inner["checkpoint_dir"], given, bool(inner.get("plain_rope")))[0]
    return given if isinstance(given, int) else None


def _check_factor(path: str, node: Mapping[str, Any]) -> None:
    """``rope_scaled``'s factor, given or its default ``max_seq_len / start``, is >= 1 (the RoPE class refused it
    only when the model was built, naming ``factor`` alone; longshort-validate said OK)."""
    method = ROPE_METHODS.get(node.get("method")) if node["_component_"] == ROPE_SCALED else None
    if method is None or not method.has_factor:
        return
    if node.get("factor") is not None:
        check_factor(f"{path}.factor", node["factor"])
    # with a factor too: the scaled model covered fewer positions than its start (its config.json said so); the
    # rule is rope_scaled's own (from Python too)
    check_scaling_target(node.get("method"), node.get("max_seq_len"), scaling_start_of_node(node),
                         node.get("factor") is not None, f"{path}.max_seq_len")


def _check_rope_values(path: str, node: Mapping[str, Any]) -> None:
    """``rope_scaled`` over a plain-RoPE ``hf_decoder`` folder: the method's class built on the meta device (nothing
    allocated), so its own checks of its arguments (YaRN's ``attention_factor``, ``alpha`` < ``beta``, ...) run now,
    named under ``path``; before, they ran when the model was built, naming the bare argument (validate said OK)."""
    inner, start, target = node.get("model"), scaling_start_of_node(node), node.get("max_seq_len")
    if (node["_component_"] != ROPE_SCALED or node.get("method") not in ROPE_METHODS or not isinstance(start, int)
            or not isinstance(target, int) or not isinstance(inner, Mapping) or inner.get("_component_") != HF_DECODER
            or not inner.get("checkpoint_dir") or not Path(str(inner["checkpoint_dir"])).is_dir()):
        return
    config = CheckpointFolder.open(inner["checkpoint_dir"]).config
    own = {n for f in (rope_scaled, apply_rope_scaling) for n in inspect.signature(f).parameters}
    given = {k: v for k, v in node.items() if k != "_component_" and k not in own}
    method = node["method"]
    try:
        head_dim = int(config.get("head_dim") or int(config["hidden_size"]) // int(config["num_attention_heads"]))
        kwargs = ROPE_METHODS[method].default_kwargs(target, start, given)
        # a parameter the method has no default for (LongRoPE's factor lists): rope_scaled replaces the model's
        # own scaling, even of the same method, and takes none of its parameters (Python's TypeError named no key)
        needed = [n for n, p in inspect.signature(ROPE_METHODS[method].__init__).parameters.items()
                  if p.kind is p.KEYWORD_ONLY and p.default is p.empty and n not in kwargs]
        if needed:
            raise ValueError(f"{path}: RoPE method {method!r} needs {' and '.join(f'{path}.{n}' for n in needed)}, "
                             "which the config does not give (rope_scaled replaces the checkpoint's own scaling and "
                             "takes none of its parameters): add them, or drop rope_scaled to keep its own RoPE")
        with torch.device("meta"):
            build_rope(method, head_dim=head_dim, max_seq_len=target, base=node.get("base") or rope_theta(config),
                       **kwargs)
    except (ValueError, TypeError) as e:
        said = str(e)
        if said.startswith(f"{path}: "):
            raise
        named = next((k for k in given if said.startswith(f"{k}=")), None)
        raise ValueError(f"{path}.{said}" if named else f"{path} (RoPE method {method!r}): {said}") from None
    except Exception:  # nothing the method's checks said (a step the meta device cannot take): left to the build
        return
