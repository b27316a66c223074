"""Where a config key misplaced by one level belongs: ``lora_rank`` at the top level or on a ``rope_scaled`` wrapper
(the model it wraps takes it: ``model.model.lora_rank``), ``train_embeddings_and_norms`` inside a model node (a
top-level key). The refusals only listed what the section takes, or said the key is no argument of the RoPE method."""

from __future__ import annotations

import inspect
from typing import Any, Dict, Iterable, Iterator, Mapping, Optional, Set, Tuple

from torchtune_longshort.config.values import resolve_component


def _named_params(node: Mapping[str, Any], path: str) -> Set[str]:
    """The keyword arguments a ``_component_`` node's builder names (not its ``**kwargs``); none when it does not
    import (refused elsewhere, naming it)."""
    try:
        params = inspect.signature(resolve_component(f"{path}._component_", node["_component_"])).parameters
    except (ValueError, TypeError, ImportError, AttributeError):
        return set()
    return {n for n, p in params.items() if p.kind not in (p.VAR_KEYWORD, p.VAR_POSITIONAL)}


def model_chain(node: Any, path: str = "model") -> Iterator[Tuple[str, Mapping[str, Any]]]:
    """``(path, node)`` of the model node ``node`` and each model node it wraps (``model.model``, ...)."""
    while isinstance(node, Mapping) and node.get("_component_"):
        yield path, node
        node, path = node.get("model"), f"{path}.model"


def wrapped_home(node: Mapping[str, Any], path: str, key: str) -> Optional[str]:
    """``<path>.model[.model...].<key>``: the nearest model node inside the one at ``path`` whose builder takes
    ``key``; None."""
    for inner, n in list(model_chain(node, path))[1:]:
        if key in _named_params(n, inner):
            return f"{inner}.{key}"
    return None


def key_homes(top_level: Iterable[str], node: Mapping[str, Any], keys: Iterable[str], where: str) -> Dict[str, str]:
    """``{key: the config path that takes it}`` for the ``keys`` refused at ``where`` (``""``: the top level) of the
    recipe config ``node`` that the top level (``top_level``: its keys) or a model node takes."""
    places = [("", set(top_level))] + [(p, _named_params(n, p)) for p, n in model_chain(node.get("model"))]
    homes = {}
    for key in keys:
        home = next((p for p, taken in places if p != where and str(key) in taken), None)
        if home is not None:
            homes[str(key)] = f"{home}.{key}" if home else str(key)
    return homes
