"""The misalignment task's suffix-length range: ``mis_min_frac`` / ``mis_max_frac`` in ``--metadata``, fractions of
each length ``L`` (default 0.5 and 1: Eq. 4's ``[L/2, L]``, ``windows.suffix_length_range``), so that one pair of
values serves every length of a sweep. At length ``L`` a fraction ``f`` gives ``max(1, floor(f * L))`` tokens (the
decimal as written: ``0.29 * 100`` is 29, not 28), the ``min_len`` / ``max_len`` that ``misalignment_metric`` and
``longshort-misalignment --min-len / --max-len`` take. Imports neither torch nor lm-eval."""

from __future__ import annotations

import math
from fractions import Fraction
from typing import Any, Mapping, Optional, Tuple

from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

# (key, default): the shortest and the longest suffix, as fractions of L
FRAC_KEYS = (("mis_min_frac", 0.5), ("mis_max_frac", 1))
FRAC_WORDS = "a number in (0, 1], a fraction of each length L (mis_min_frac 0.5, mis_max_frac 1: Eq. 4's [L/2, L])"


def fraction(value: Any) -> Optional[Fraction]:
    """``value`` (a number, or its text as ``key=value`` metadata gives it) as an exact fraction in ``(0, 1]``;
    None when it is not one."""
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        return None
    try:
        f = Fraction(str(value).strip())
    except (ValueError, ZeroDivisionError):
        return None
    return f if 0 < f <= 1 else None


def suffix_fractions(metadata: Mapping[str, Any]) -> Tuple[Fraction, Fraction]:
    """``(mis_min_frac, mis_max_frac)`` of ``metadata`` (unset: the defaults), refused with
    :class:`TaskDataError` in one line when either is not in ``(0, 1]`` or the first is past the second."""
    got = []
    for key, default in FRAC_KEYS:
        value = metadata.get(key)
        value = default if value in (None, "") else value
        f = fraction(value)
        if f is None:
            raise TaskDataError(f"{key}={value!r}: expected {FRAC_WORDS}")
        got.append(f)
    if got[0] > got[1]:
        said = [f"{k}={metadata[k]!r}" if metadata.get(k) not in (None, "") else f"{k} {d} (its default)"
                for k, d in FRAC_KEYS]
        raise TaskDataError(f"{said[0]} > {said[1]}: give mis_min_frac <= mis_max_frac")
    return got[0], got[1]


def suffix_range(metadata: Mapping[str, Any], length: int) -> Tuple[int, int]:
    """The inclusive ``(min_len, max_len)`` of the task's draws at ``length`` (:func:`suffix_fractions`)."""
    low, high = suffix_fractions(metadata)
    return tuple(max(1, math.floor(f * length)) for f in (low, high))  # type: ignore[return-value]
