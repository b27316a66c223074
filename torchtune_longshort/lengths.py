"""The length grammar of every command line, config and task that takes a token count: ``1k`` is 1024 tokens.

A length label is a token count written as ``<n>k`` when it is a whole multiple of 1024 (``1024 -> "1k"``,
``0 -> "0k"``, BABILong's empty-haystack length) and as plain digits otherwise (``512 -> "512"``); either form is
read back (:func:`parse_length`), and a comma list of them is a list of lengths (:func:`parse_lengths`, the task
pack's ``max_seq_lengths``). :func:`length_arg` is the ``argparse`` type of a ``--length`` option.
"""

from __future__ import annotations

import re
from typing import Any, List, Optional, Sequence, Union

_LABEL = re.compile(r"^(\d+)(k?)$")

LengthList = Union[str, int, Sequence[Union[str, int]]]


def length_label(n: int) -> str:
    """Token count -> its label: 512 -> ``"512"``, 1024 -> ``"1k"``, 0 -> ``"0k"``."""
    n = int(n)
    return f"{n // 1024}k" if n % 1024 == 0 else str(n)


def parse_length(label: Union[str, int]) -> Optional[int]:
    """``"4k"`` -> 4096, ``"512"`` / 512 -> 512, anything else (``"e"``, ``"4k_d50"``) -> None."""
    if isinstance(label, int) and not isinstance(label, bool):
        return label if label >= 0 else None
    m = _LABEL.match(str(label).strip())
    if not m:
        return None
    return int(m.group(1)) * (1024 if m.group(2) else 1)


def list_items(value: Any) -> List[Any]:
    """The items of a list-valued setting in every form it is given (``--metadata`` JSON, a task YAML, a config):
    a list or tuple, a comma list ``"0,50,100"`` (each item stripped), or one value (``2048``); empty items dropped.
    The one reader of ``max_seq_lengths``, ``passkey_depths`` and ``mis_divergences``."""
    items = value.split(",") if isinstance(value, str) else list(value) if isinstance(value, (list, tuple)) else [value]
    return [i for i in (i.strip() if isinstance(i, str) else i for i in items) if i != ""]


def parse_lengths(value: LengthList, key: str = "max_seq_lengths") -> List[int]:
    """``"1k,4k"``, ``[1024, "4k"]`` or ``2048`` -> token counts in the given order; ``ValueError`` naming ``key``,
    the value and the accepted forms for anything else (empty, negative, not a length)."""
    items = list_items(value)
    lengths = [parse_length(i) for i in items]
    bad = [i for i, n in zip(items, lengths) if n is None]
    if not items or bad:
        raise ValueError(f"{key}={value!r}: {bad or 'empty'} not accepted; accepted: a comma list or list of token "
                         "counts or labels, e.g. \"512,1k,4k\" or [512, 1024, 4096]")
    return [int(n) for n in lengths]


def length_value(key: str, value: Union[str, int], minimum: int = 1) -> int:
    """One length (``1k``, ``"512"``, 512) as a token count >= ``minimum``; ``ValueError`` naming ``key`` and the
    accepted forms."""
    n = parse_length(value)
    if n is None or n < minimum:
        raise ValueError(f"{key}={value!r} is not accepted: expected a token count >= {minimum}, as digits or as "
                         "<n>k (1k = 1024), e.g. 512 or 4k")
    return n


def length_arg(text: str) -> int:
    """``argparse`` type of a length option: ``512``, ``1k`` (argparse names the option in its error)."""
    n = parse_length(text)
    if n is None or n < 1:
        raise ValueError(text)
    return n


length_arg.__name__ = "length (512, 1k, 4k, ...)"
