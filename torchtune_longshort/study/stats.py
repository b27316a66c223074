"""The study report's statistics: paired differences over seeds with t intervals, and correlations with intervals.

Everything here is a pure function of lists of numbers, so the report's figures can be checked against scipy.

- :func:`paired_difference`: the same comparison (e.g. ``alpha = 0.1`` against CE, same RoPE method) repeated
  over seeds; the difference is taken per seed (same base model, same data order) and summarized by its mean
  and a Student-t interval over the seeds.
- :func:`correlation`: Pearson's r with the Fisher-z interval, and Spearman's rho (Pearson on average ranks) with
  the Fisher-z interval whose standard error is ``sqrt(1.06 / (n - 3))`` (Fieller, Hartley and Pearson, 1957).
- :func:`spearman_permutation_p`: the permutation p-value of Spearman's rho (exact at small n).
"""

from __future__ import annotations

import math
import statistics
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np
from scipy import stats as _st

from torchtune_longshort.intervals import CONFIDENCE, t_interval  # noqa: F401  (the study's intervals are these)


def paired_difference(treated: Mapping[int, float], control: Mapping[int, float],
                      confidence: float = CONFIDENCE) -> Dict[str, object]:
    """``treated[s] - control[s]`` over the seeds ``s`` both have, with :func:`t_interval` of those differences.

    Returns ``{n, mean, lo, hi, sd, seeds, values}``; ``n == 0`` when no seed is shared.
    """
    seeds = sorted(set(treated) & set(control))
    diffs = [float(treated[s]) - float(control[s]) for s in seeds]
    out: Dict[str, object] = dict(t_interval(diffs, confidence))
    out.update({"seeds": seeds, "values": diffs})
    return out


def direction(diff: Mapping[str, object], lower_is_better: Optional[bool]) -> str:
    """``"better"`` / ``"worse"`` when the interval excludes 0 on that side, ``"no difference"`` when it holds 0,
    ``"unknown"`` without an interval (fewer than 2 seeds) or without a value. ``lower_is_better=None`` (a score
    with no better side, such as entropy): ``"lower"`` / ``"higher"`` instead of better / worse."""
    lo, hi = diff.get("lo"), diff.get("hi")
    if lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return "unknown"
    if hi < 0:
        return "lower" if lower_is_better is None else ("better" if lower_is_better else "worse")
    if lo > 0:
        return "higher" if lower_is_better is None else ("worse" if lower_is_better else "better")
    return "no difference"


def ranks(values: Sequence[float]) -> List[float]:
    """1-based ranks, ties given their average rank (as Spearman's rho needs)."""
    order = sorted(range(len(values)), key=lambda i: values[i])
    out = [0.0] * len(values)
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            out[order[k]] = (i + j) / 2 + 1
        i = j + 1
    return out


def _pearson(x: Sequence[float], y: Sequence[float]) -> Optional[float]:
    mx, my = statistics.fmean(x), statistics.fmean(y)
    sxy = sum((a - mx) * (b - my) for a, b in zip(x, y))
    sxx = sum((a - mx) ** 2 for a in x)
    syy = sum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return max(-1.0, min(1.0, sxy / math.sqrt(sxx * syy)))


def _fisher_interval(r: Optional[float], n: int, se_scale: float, confidence: float):
    if r is None or n <= 3:
        return None, None
    if abs(r) >= 1:
        return r, r
    z, se = math.atanh(r), math.sqrt(se_scale / (n - 3))
    q = _st.norm.ppf(0.5 + confidence / 2)
    return math.tanh(z - q * se), math.tanh(z + q * se)


def correlation(x: Sequence[float], y: Sequence[float], confidence: float = CONFIDENCE) -> Dict[str, object]:
    """Pearson's r and Spearman's rho of the pairs ``(x[i], y[i])`` with finite values, each with a Fisher-z interval.

    Returns ``{n, pearson, pearson_lo, pearson_hi, spearman, spearman_lo, spearman_hi}`` (``None`` where a value or
    interval is undefined: fewer than 3 pairs, a constant variable, or ``n <= 3`` for the intervals).
    """
    pairs = [(float(a), float(b)) for a, b in zip(x, y)
             if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    n = len(pairs)
    out: Dict[str, object] = {"n": n, "pearson": None, "pearson_lo": None, "pearson_hi": None,
                              "spearman": None, "spearman_lo": None, "spearman_hi": None}
    if n < 3:
        return out
    xs, ys = [p[0] for p in pairs], [p[1] for p in pairs]
    r = _pearson(xs, ys)
    rho = _pearson(ranks(xs), ranks(ys))
    out["pearson"], out["spearman"] = r, rho
    out["pearson_lo"], out["pearson_hi"] = _fisher_interval(r, n, 1.0, confidence)
    out["spearman_lo"], out["spearman_hi"] = _fisher_interval(rho, n, 1.06, confidence)
    return out


def spearman_permutation_p(x: Sequence[float], y: Sequence[float], exact_up_to: int = 9,
                           n_resamples: int = 20000, seed: int = 0) -> Optional[float]:
    """Two-sided permutation p-value of Spearman's rho of the pairs ``(x[i], y[i])`` with finite values (the pairs
    :func:`correlation` keeps): the share of pairings of ``y`` with ``x`` whose ``|rho|`` is at least the observed
    ``|rho|``. Exact, over all ``n!`` pairings (the observed one included), for ``n <= exact_up_to``; else
    ``(hits + 1) / (n_resamples + 1)`` over ``n_resamples`` random pairings. ``None`` for fewer than 3 pairs or a
    constant variable. The small-sample companion of :func:`correlation`'s Fisher-z interval, whose normal
    approximation is rough at n < 10 and undefined at ``|rho| = 1``."""
    pairs = [(float(a), float(b)) for a, b in zip(x, y)
             if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]
    n = len(pairs)
    if n < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None
    cx = np.asarray(ranks([a for a, _ in pairs]))
    cx = cx - cx.mean()

    def abs_rho(yy: np.ndarray, axis: int = -1) -> np.ndarray:  # |Pearson| on average ranks, over a batch of ys
        ry = _st.rankdata(yy, axis=axis)
        ry = ry - ry.mean(axis=axis, keepdims=True)
        return np.abs((ry * cx).sum(axis=axis)) / np.sqrt((ry ** 2).sum(axis=axis) * (cx ** 2).sum())

    res = _st.permutation_test((np.asarray([b for _, b in pairs]),), abs_rho, permutation_type="pairings",
                               vectorized=True, n_resamples=math.inf if n <= exact_up_to else n_resamples,
                               alternative="greater", rng=np.random.default_rng(seed))
    return float(min(1.0, res.pvalue))
