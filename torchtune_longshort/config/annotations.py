"""A component's arguments against its parameters' type annotations, for this package's own components: a value of
the wrong kind (``dataset.min_bytes=abc``, ``dataset.suffixes=5``) is refused in the config check, naming the key,
instead of failing with a traceback inside the component when the run builds it.

Only plain annotations are checked (int, float, bool, str, ``Optional`` / ``Union`` of them, a list or tuple of
them, a mapping, a ``Literal``); anything else (a class, a callable, ``Any``) accepts every value. Other packages'
components are left to their own checks: their annotations are not written for a config's values.
"""

from __future__ import annotations

import collections.abc
import inspect
import typing
from pathlib import PurePath
from typing import Any, Mapping, Optional

from torchtune_longshort.config.values import refuse

PACKAGE = "torchtune_longshort"
_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.Iterable)


_PLURAL = {"an integer": "integers", "a number": "numbers", "a string": "strings", "a path": "paths"}


def _item(hint: Any) -> Any:
    """The annotation of every item of the sequence annotation ``hint`` (None: items of several kinds, or any)."""
    args = [a for a in typing.get_args(hint) if a is not Ellipsis]
    return args[0] if args and all(a == args[0] for a in args) else None


def _is_path(hint: Any) -> bool:
    return isinstance(hint, type) and issubclass(hint, PurePath)


def expected(hint: Any) -> Optional[str]:
    """What ``hint`` accepts in words, or None when it is not a plain annotation (every value accepted)."""
    origin = typing.get_origin(hint)
    if hint in (int, float, str, bool) or _is_path(hint):
        return {int: "an integer", float: "a number", str: "a string", bool: "true or false"}.get(hint, "a path")
    if origin is typing.Union:
        words = [expected(a) for a in typing.get_args(hint) if a is not type(None)]
        if any(w is None for w in words):
            return None
        return " or ".join(words + (["null"] if type(None) in typing.get_args(hint) else []))
    if origin is typing.Literal:
        return f"one of {list(typing.get_args(hint))}"
    if hint in (list, tuple) or origin in _SEQUENCES:
        words = expected(_item(hint))
        return "a list" if words is None else f"a list of {_PLURAL.get(words, words)}"
    if hint is dict or origin in (dict, collections.abc.Mapping):
        return "a mapping"
    return None


def accepts(hint: Any, value: Any) -> bool:
    """Whether ``value`` (as a config gives it: YAML scalars, lists, mappings) is of the plain annotation ``hint``."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if expected(hint) is None:
        return True
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if hint is str or _is_path(hint):
        return isinstance(value, str)
    if origin is typing.Union:
        return (value is None and type(None) in args) or any(accepts(a, value) for a in args if a is not type(None))
    if origin is typing.Literal:
        return value in args
    if hint in (list, tuple) or origin in _SEQUENCES:  # a string is not a list of suffixes
        return isinstance(value, (list, tuple)) and all(accepts(_item(hint), v) for v in value)
    return isinstance(value, Mapping)


def check_annotated_args(target: Any, args: Mapping[str, Any], where: str) -> None:
    """Refuse an argument in ``args`` (a component node's keys, at config path ``where``) that ``target``'s
    annotation for it does not accept, when ``target`` is this package's own; a null value is left to the
    component's default handling, where it has a default (torchtune hands it None: ``model.method: null`` passed,
    and rope_scaled refused it once the run had loaded the model). An empty string is refused wherever a string is
    accepted: no parameter of this package's takes one (a path, a name, a split, a field)."""
    if not str(getattr(target, "__module__", "")).startswith(PACKAGE):
        return
    try:
        hints = typing.get_type_hints(target)
        params = inspect.signature(target).parameters
    except Exception:  # an annotation that does not resolve here: nothing to check against
        return
    for name, value in args.items():
        hint = hints.get(name)
        if value == "" and name in params and hint is not None and accepts(hint, value):
            # none of this package's parameters takes an empty string; as a path it is the working directory
            # (model.model.checkpoint_dir='' passed here and failed after seeding as "checkpoint_dir='.' has no
            # config.json"; dataset.path='' read the working directory's files)
            raise refuse(f"{where}.{name}", value, f"{expected(hint).replace('a string', 'a non-empty string', 1)} "
                         f"({target.__name__}'s {name})")
        empty = [i for i, v in enumerate(value) if v == ""] if isinstance(value, (list, tuple)) else []
        if empty and name in params and hint is not None and accepts(hint, value) and not name.endswith("suffixes"):
            # an empty path in a list is the working directory too (dataset.path=[''] read its files); an empty
            # suffix is one (a file without a suffix)
            raise refuse(f"{where}.{name}[{empty[0]}]", "", f"a non-empty string ({target.__name__}'s {name} item)")
        if name not in params or hint is None or accepts(hint, value):
            continue
        if value is None and params[name].default is not inspect.Parameter.empty:
            continue
        raise refuse(f"{where}.{name}", value, f"{expected(hint)} ({target.__name__}'s {name})")
