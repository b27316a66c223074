"""The interval of a mean, wherever one is printed or written: Student's t with ``n - 1`` degrees of freedom
(``scipy.stats.t``), never the normal ``z = 1.96``, which at ``n = 8`` is 17% too narrow (t: 2.365).

:func:`t_interval` summarizes values (the study's seeds, the misalignment metric's samples); :func:`t_half_width`
is the half-width from a standard deviation and a count.
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, Optional, Sequence

from scipy import stats as _st

CONFIDENCE = 0.95


def t_half_width(sd: float, n: int, confidence: float = CONFIDENCE) -> float:
    """Half-width of the Student-t interval of a mean of ``n >= 2`` values with sample standard deviation ``sd``."""
    if n < 2:
        raise ValueError(f"n={n}: a t interval needs at least 2 values")
    return float(_st.t.ppf(0.5 + confidence / 2, n - 1)) * sd / math.sqrt(n)


def t_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> Dict[str, Optional[float]]:
    """Mean of ``values`` and its Student-t interval (``n - 1`` degrees of freedom); no interval for ``n < 2``."""
    vals = [float(v) for v in values]
    n = len(vals)
    if n == 0:
        return {"n": 0, "mean": None, "lo": None, "hi": None, "sd": None}
    mean = statistics.fmean(vals)
    if n < 2:
        return {"n": 1, "mean": mean, "lo": None, "hi": None, "sd": None}
    sd = statistics.stdev(vals)
    half = t_half_width(sd, n, confidence)
    return {"n": n, "mean": mean, "lo": mean - half, "hi": mean + half, "sd": sd}
