"""The ``--model_args`` of a command line, read and edited as lm-eval 0.4.13's CLI reads them.

lm-eval's ``--model_args`` (``nargs="+"``, its ``MergeDictAction``) takes a JSON object
(``'{"pretrained": "/runs 1,2/step_2", "device": "cpu"}'``, which a value holding a comma needs) or ``key=value``
items (``pretrained=DIR,device=cpu``, or ``pretrained=DIR device=cpu``), and merges repeated options. Every place the
wrapper reads a key of them (``device``, ``batch_size``, ``pretrained``...) or edits them (a key taken out, a key
renamed) asks this module, so that both spellings are read, and written back, alike: a key read only in the
``key=value`` spelling went to the model beside the wrapper's own ``--device`` (hf: "HFLM() got multiple values for
keyword argument 'device'").
"""

from __future__ import annotations

import json
from typing import Any, Callable, Dict, List, Optional, Tuple


def model_args_spans(out: List[str]) -> List[int]:
    """Indices of the ``--model_args`` value tokens in ``out`` (long option names; ``-a`` too)."""
    spans, i = [], 0
    while i < len(out):
        if out[i].startswith("--model_args="):
            spans.append(i)
        elif out[i] in ("--model_args", "-a"):
            j = i + 1
            while j < len(out) and not out[j].startswith("-"):
                spans.append(j)
                j += 1
            i = j
            continue
        i += 1
    return spans


def _split(token: str) -> Tuple[str, str]:
    """``token`` as ``(head, value)``: ``--model_args=`` and what follows it, or ``""`` and the token itself."""
    head, sep, value = token.partition("--model_args=") if token.startswith("--model_args=") else ("", "", token)
    return head + sep, value


def _as_json(value: str) -> Optional[Dict[str, Any]]:
    """The JSON object ``value`` spells, as lm-eval's ``try_parse_json`` reads it, else None (``key=value`` items, or
    a value lm-eval's own parser refuses, naming --model_args)."""
    from lm_eval._cli.utils import try_parse_json  # deferred: the wrapper's modules import lm_eval when they run

    try:
        parsed = try_parse_json(value)
    except ValueError:
        return None
    return parsed if isinstance(parsed, dict) else None


def _pieces(value: str) -> List[str]:
    """``value``'s ``key=value`` items, split at the commas lm-eval splits at (its ``split_top_level``)."""
    from lm_eval._cli.utils import split_top_level  # deferred: as _as_json

    return split_top_level(value)


def _items(value: str) -> List[Tuple[str, str]]:
    """``(key, value)`` of each item of ``value``, the value as typed (an item without ``=`` is lm-eval's parser's
    to refuse)."""
    return [(k, v) for k, eq, v in (item.partition("=") for item in _pieces(value)) if eq]


def model_args_value(out: List[str], key: str) -> Optional[str]:
    """``key`` of ``out``'s ``--model_args`` in either spelling (the last one given, as lm-eval merges them), as
    typed (``key=value``) or as text (a JSON value: ``str``; a JSON ``null`` is None), else None."""
    found: Optional[str] = None
    spans = model_args_spans(out)
    for k in spans:
        value = _split(out[k])[1]
        parsed = _as_json(value)
        if parsed is not None:
            if key in parsed:
                found = None if parsed[key] is None else str(parsed[key])
            continue
        found = next((v for k2, v in reversed(_items(value)) if k2.strip() == key), found)
    return found


def _last_given(out: List[str], key: str) -> Optional[Tuple[bool, Any]]:
    """Whether the last ``--model_args`` token of ``out`` giving ``key`` is JSON, and the value it gives (parsed from
    JSON, or as typed in ``key=value`` items); None when no token gives ``key``."""
    last: Optional[Tuple[bool, Any]] = None
    for k in model_args_spans(out):
        text = _split(out[k])[1]
        parsed = _as_json(text)
        if parsed is not None and key in parsed:
            last = (True, parsed[key])
        elif parsed is None:
            last = next(((False, v) for n, v in reversed(_items(text)) if n.strip() == key), last)
    return last


def _as_given(key: str, value: Any, as_json: bool) -> str:
    """``key`` set to ``value`` in ``--model_args``'s spelling: a JSON member or a ``key=value`` item."""
    return f"{json.dumps({key: value})[1:-1]} in --model_args's JSON" if as_json else f"--model_args {key}={value}"


def json_fix(out: List[str], key: str, value: str) -> Optional[str]:
    """The fix that sets ``key`` to ``value`` in the spelling the user gave it in, when the last ``--model_args``
    token giving ``key`` is JSON (``"device": "cpu" in --model_args's JSON``); None otherwise (``key=value`` items,
    whose ``--model_args key=value`` fix the caller words, or ``key`` not given)."""
    last = _last_given(out, key)
    return _as_given(key, value, True) if last is not None and last[0] else None


def model_args_item(out: List[str], key: str) -> Optional[str]:
    """``key`` of ``out``'s ``--model_args`` as the user wrote it (the last token giving it, as lm-eval merges them):
    ``"device": "cpu" in --model_args's JSON`` or ``--model_args device=cpu``; None when not given."""
    last = _last_given(out, key)
    return None if last is None else _as_given(key, last[1], last[0])


def _edited(value: str, edit_json, edit_items) -> str:
    """``value`` (one ``--model_args`` token) edited in its own spelling: a JSON object written back as JSON."""
    parsed = _as_json(value)
    if parsed is not None:
        return json.dumps(edit_json(parsed))
    return ",".join(edit_items(_pieces(value)))


def model_args_values_mapped(out: List[str], fn: Callable[[str, str], str]) -> List[str]:
    """``out`` with ``fn(key, value)`` in place of each string value of its ``--model_args`` (a JSON string, or a
    ``key=value`` item's value as typed, its items split where lm-eval splits them), each token in the spelling it was
    given in; a token whose values ``fn`` all leaves alike stays as typed."""
    out = list(out)
    for k in model_args_spans(out):
        head, value = _split(out[k])
        changed: List[bool] = []

        def mapped(key: str, text: str) -> str:
            given = fn(key, text)
            changed.append(given != text)
            return given

        new = _edited(value, lambda d: {n: mapped(n, v) if isinstance(v, str) else v for n, v in d.items()},
                      lambda items: [n + eq + (mapped(n.strip(), v) if eq else v) for n, eq, v in
                                     (i.partition("=") for i in items)])
        out[k] = head + new if any(changed) else out[k]
    return out


def without_model_args_key(out: List[str], key: str) -> List[str]:
    """``out`` with ``key`` taken out of every ``--model_args`` token, each in the spelling it was given in."""
    out = list(out)
    for k in model_args_spans(out):
        head, value = _split(out[k])
        out[k] = head + _edited(value, lambda d: {n: v for n, v in d.items() if n != key},
                                lambda items: [i for i in items if i.partition("=")[0].strip() != key])
    return out


def renamed_model_args_key(out: List[str], old: str, new: str) -> List[str]:
    """``out`` with every ``--model_args`` token holding ``old`` holding it as ``new`` instead (the values kept, in
    the tokens' spelling: lm-eval then merges them, the last one winning, as it would ``old``); ``out`` itself when
    none holds ``old`` or any already gives ``new``."""
    if model_args_value(out, new) is not None or model_args_value(out, old) is None:
        return out
    out = list(out)
    for k in model_args_spans(out):
        head, value = _split(out[k])
        parsed = _as_json(value)
        if (parsed is not None and old in parsed) or (parsed is None and any(n.strip() == old for n, _ in
                                                                              _items(value))):
            out[k] = head + _edited(value, lambda d: {(new if n == old else n): v for n, v in d.items()},
                                    lambda items: [new + "=" + i.partition("=")[2] if i.partition("=")[0].strip() == old
                                                   else i for i in items])
    return out
