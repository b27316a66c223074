"""The task pack's length grammar: one home for "1k = 1024 tokens" and for the ``max_seq_lengths`` metadata key.

A length label is a token count written as ``<n>k`` when it is a whole multiple of 1024 (``1024 -> "1k"``,
``0 -> "0k"``, BABILong's empty-haystack length) and as plain digits otherwise (``512 -> "512"``). Length-swept
tasks (``long_ppl``, ``longshort_passkey``, ``misalignment``, ``babilong_longshort``) take their lengths from
lm-eval's ``--metadata``, as lm-eval's RULER does: the shared key ``max_seq_lengths`` (``"2k,4k"``, ``[2048,
4096]``), or a task's own ``<prefix>_max_seq_lengths`` when one run sweeps different lengths per task. Each task
reports one metric per length, named ``<metric>_<label>`` (``ppl_4k``, ``acc_2k``, ``sce_512``).
"""

from __future__ import annotations

import re
from typing import Any, List, Mapping, Optional, Sequence, Union

METADATA_KEY = "max_seq_lengths"
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


def parse_lengths(value: LengthList, key: str = METADATA_KEY) -> List[int]:
    """``"1k,4k"``, ``[1024, "4k"]`` or ``2048`` -> token counts in the given order; ``ValueError`` naming ``key``,
    the value and the accepted forms for anything else (empty, negative, not a length)."""
    items = value.split(",") if isinstance(value, str) else [value] if isinstance(value, int) else list(value)
    items = [i.strip() if isinstance(i, str) else i for i in items]
    items = [i for i in items if i != ""]
    lengths = [parse_length(i) for i in items]
    bad = [i for i, n in zip(items, lengths) if n is None]
    if not items or bad:
        raise ValueError(f"{key}={value!r}: {bad or 'empty'} not accepted; accepted: a comma list or list of token "
                         "counts or labels, e.g. \"512,1k,4k\" or [512, 1024, 4096]")
    return [int(n) for n in lengths]


def lengths_key(prefix: str) -> str:
    """The metadata key of one task's own lengths: ``"ppl" -> "ppl_max_seq_lengths"``."""
    return f"{prefix}_{METADATA_KEY}"


def lengths_from_metadata(metadata: Mapping[str, Any], prefix: str) -> List[int]:
    """The lengths a task sweeps: ``<prefix>_max_seq_lengths`` if set, else ``max_seq_lengths`` (the task YAML's
    ``metadata`` holds its default, ``--metadata`` overrides it)."""
    own = lengths_key(prefix)
    key = own if metadata.get(own) not in (None, "", []) else METADATA_KEY
    if metadata.get(key) in (None, "", []):
        raise ValueError(f"no lengths: set {METADATA_KEY} (or {own}) in the task's metadata or in --metadata, "
                         "e.g. --metadata '{\"max_seq_lengths\": \"2k,4k\"}'")
    return parse_lengths(metadata[key], key)


def per_length(metric: str, length: int) -> str:
    """The name of ``metric`` at one length: ``("ppl", 4096) -> "ppl_4k"``."""
    return f"{metric}_{length_label(length)}"


def per_depth(metric: str, depth: int) -> str:
    """The name of ``metric`` at one depth in percent (passkey, BABILong): ``("acc_4k", 50) -> "acc_4k_d50"``."""
    return f"{metric}_d{depth}"
