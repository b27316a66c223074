"""The misalignment task's ``mis_divergences`` metadata: the divergences it names, and why a dotted path of one's
own among them is refused (the registry's reason: it does not import, names no function, gives another shape,
depends on the logits other than through their softmaxes), which the ``--metadata`` check appends."""

from __future__ import annotations

from typing import Any, List, Optional

from torchtune_longshort.lengths import list_items


def _names(value: Any) -> Any:
    return list_items(value) if isinstance(value, (str, list, tuple)) else value


def divergence_names(value: Any) -> Optional[List[str]]:
    """The divergences ``mis_divergences`` names (a list, or one name or a comma list: ``"js"``, ``"sce,js"``):
    shipped names or dotted paths that import (``loss.divergences.is_divergence``); None when it names none or
    another (a string was read letter by letter: ``"js"`` asked for divergences ``j`` and ``s``)."""
    from torchtune_longshort.loss.divergences import is_divergence  # deferred: torch

    names = _names(value)
    if not isinstance(names, (list, tuple)) or not names or not all(is_divergence(n) for n in names):
        return None
    return list(dict.fromkeys(names))


def divergence_refusal(value: Any) -> str:
    """'' or ``" (<the registry's reason>)"`` for the first dotted path in ``value`` that :func:`divergence_names`
    refuses."""
    from torchtune_longshort.loss.divergences import divergence_fn, is_divergence  # deferred: torch

    names = _names(value)
    for name in names if isinstance(names, (list, tuple)) else ():
        if isinstance(name, str) and "." in name and not is_divergence(name):
            try:
                divergence_fn(name)
            except ValueError as e:
                return f" ({e})"
    return ""
