"""The task pack's lengths: the ``max_seq_lengths`` metadata key, over the package's length grammar
(:mod:`torchtune_longshort.lengths`: "1k = 1024 tokens").

A length label is a token count written as ``<n>k`` when it is a whole multiple of 1024 (``1024 -> "1k"``,
``0 -> "0k"``, BABILong's empty-haystack length) and as plain digits otherwise (``512 -> "512"``). Length-swept
tasks (``longshort_ppl``, ``longshort_passkey``, ``longshort_misalignment``, ``longshort_babilong``) take their lengths
from lm-eval's ``--metadata``, as lm-eval's RULER does: the shared key ``max_seq_lengths`` (``"2k,4k"``, ``[2048,
4096]``), or a task's own ``<prefix>_max_seq_lengths`` when one run sweeps different lengths per task. Each task
reports one metric per length, named ``<metric>_<label>`` (``ppl_4k``, ``acc_2k``, ``sce_512``).
"""

from __future__ import annotations

import math
from typing import Any, Dict, Hashable, List, Mapping, Optional, Sequence, Tuple

# The grammar itself (labels, "1k" = 1024) is the package's, shared with every command line and config that takes a
# length; re-exported here for the pack's modules.
from torchtune_longshort.lengths import length_label, list_items, parse_length, parse_lengths  # noqa: F401

METADATA_KEY = "max_seq_lengths"


def percentages(value: Any) -> Optional[List[float]]:
    """The depths of ``passkey_depths`` in percent, in order: a list (``[0, 50, 100]``), a comma list
    (``"0,50,100"``, as ``max_seq_lengths`` takes one) or one number (:func:`list_items`); each a number in [0, 100]
    (digits too); None for anything else (empty included)."""
    out = []
    for item in list_items(value):
        try:
            x = float(item) if not isinstance(item, bool) and isinstance(item, (int, float, str)) else None
        except ValueError:
            x = None
        if x is None or not 0 <= x <= 100:
            return None
        out.append(int(x) if x.is_integer() else x)
    return out or None


def comparable(key: str, value: Any) -> Any:
    """``value`` of ``--metadata`` key ``key`` in one spelling, for telling whether two runs ran alike: a list-valued
    key's items as its task reads them (:func:`list_items`: a list, a comma list or one value), so ``"0,50,100"`` and
    ``[0, 50, 100]`` are one setting: ``max_seq_lengths`` / ``<prefix>_max_seq_lengths`` as token counts (``"2k"``
    and ``2048`` alike), ``passkey_depths`` as percentages, ``mis_divergences`` as names; any other key's value, or
    one its task would refuse, as it is; a number or true / false written as text as the number or flag it is."""
    try:
        if key == METADATA_KEY or key.endswith("_" + METADATA_KEY):
            return parse_lengths(value, key)
    except (ValueError, TypeError):
        return value
    if key == "passkey_depths":
        return percentages(value) or value
    if key == "mis_divergences" and isinstance(value, (str, list, tuple)):
        return list_items(value) or value
    return _as_typed(value)


def _as_typed(value: Any) -> Any:
    """A text value as lm-eval's ``--metadata key=value`` types it (its own ``handle_arg_string``): ``"8"`` is 8,
    ``"0.5"`` 0.5, ``"True"`` true, so a JSON ``{"passkey_seed": "3"}`` and ``passkey_seed=3`` are one setting (the
    tasks read both alike); other text (``"+-3"``, ``"nan"``, ``"none"``, a quoted ``'"3"'``), and anything not text,
    as it is."""
    if not isinstance(value, str):
        return value
    from lm_eval.utils import handle_arg_string  # deferred: lm_eval (only for a value written as text)

    typed = handle_arg_string(value)
    finite = isinstance(typed, (bool, int)) or (isinstance(typed, float) and math.isfinite(typed))
    return typed if finite else value


def lengths_key(prefix: str) -> str:
    """The metadata key of one task's own lengths: ``"ppl" -> "ppl_max_seq_lengths"``."""
    return f"{prefix}_{METADATA_KEY}"


def lengths_source(metadata: Mapping[str, Any], prefix: str) -> str:
    """The key a task's lengths come from: ``<prefix>_max_seq_lengths`` if set, else ``max_seq_lengths``."""
    own = lengths_key(prefix)
    return own if metadata.get(own) not in (None, "", []) else METADATA_KEY


def lengths_from_metadata(metadata: Mapping[str, Any], prefix: str) -> List[int]:
    """The lengths a task sweeps: ``<prefix>_max_seq_lengths`` if set, else ``max_seq_lengths`` (the task YAML's
    ``metadata`` holds its default, ``--metadata`` overrides it)."""
    own, key = lengths_key(prefix), lengths_source(metadata, prefix)
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


def round_robin_order(cells: Sequence[Tuple[Hashable, Hashable]]) -> List[int]:
    """The order of a sweep's rows, ``cells[i] = (length, depth)`` being row ``i``'s cell (depth None when it has
    none): round by round, one row of each cell, the cells of the first depth first, each at every length in turn
    (lengths and depths in the order they first appear); the order inside a cell is kept. lm-eval's ``--limit N``
    takes a task's first N rows, which then spread over every length (N >= the number of lengths) and every cell
    (N >= the number of cells); before, rows went cell by cell and ``--limit`` dropped whole lengths and depths."""
    by_cell: Dict[Tuple[Hashable, Hashable], List[int]] = {}
    for i, cell in enumerate(cells):
        by_cell.setdefault(cell, []).append(i)
    lengths = list(dict.fromkeys(length for length, _ in cells))
    depths = list(dict.fromkeys(depth for _, depth in cells))
    groups = [by_cell[c] for c in sorted(by_cell, key=lambda c: (depths.index(c[1]), lengths.index(c[0])))]
    return [g[k] for k in range(max((len(g) for g in groups), default=0)) for g in groups if k < len(g)]
