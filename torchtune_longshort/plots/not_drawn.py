"""What a per-position loss curve cannot draw: its positions without a finite loss (NaN, inf: a model that overflowed
at long positions), said in its legend entry, as the reports' other figures say a point they do not draw."""

from __future__ import annotations

import math
from typing import Iterable


def positions_not_drawn(curve: Iterable[float]) -> str:
    """``" (k of n positions without a finite loss: not drawn)"``, or ``""`` when every value of ``curve`` is finite.
    A curve drawn as means of a few positions loses the whole mean of a bucket holding one: still k counted here."""
    values = list(curve)
    bad = sum(1 for v in values if v is None or not math.isfinite(float(v)))
    if not bad:
        return ""
    return f" ({bad} of {len(values)} position{'s' * (len(values) != 1)} without a finite loss: not drawn)"
