"""Reading a study run's result.json: a score family at a length, and the mean of a per-position loss curve."""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, Optional

from torchtune_longshort.eval.tasks import task_results
from torchtune_longshort.study.config import metric_of


def value(rec: Dict[str, Any], family: str, n: Any) -> Optional[float]:
    """``family`` (ppl, misalignment, jeffreys, entropy, passkey, babilong) at length ``n`` from a result.json.

    ``entropy`` is the mean next-token entropy ``(H(p) + H(q)) / 2`` of the misalignment task's two windows, from
    its SCE and Jeffreys values: ``SCE = H(p, q) + H(q, p)`` and ``Jeffreys = SCE - H(p) - H(q)``."""
    if family == "entropy":
        sce, jef = value(rec, "misalignment", n), value(rec, "jeffreys", n)
        return None if sce is None or jef is None else (sce - jef) / 2
    task, metric = metric_of(family, n)
    v = task_results(rec.get("results") or {}, task).get(metric)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def curve_mean(rec: Dict[str, Any], length: int, lo: int, hi: int) -> Optional[float]:
    """Mean per-position NLL over positions ``[lo, hi)`` of the ``length``-token perplexity curve."""
    c = (rec.get("curves") or {}).get(str(length)) or (rec.get("curves") or {}).get(length)
    if not c or hi > len(c) or lo >= hi:
        return None
    return statistics.fmean(c[lo:hi])
