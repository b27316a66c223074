"""The study report's statistics: paired differences over seeds with t intervals, and correlations with intervals.

Everything here is a pure function of lists of numbers; the statistics themselves are scipy's, and the tests check
them against closed forms and naive implementations.

- :func:`paired_difference`: the same comparison (e.g. ``alpha = 0.1`` against CE, same RoPE method) repeated
  over seeds; the difference is taken per seed (same base model, same data order) and summarized by its mean
  and a Student-t interval over the seeds.
- :func:`correlation`: Pearson's r with the Fisher-z interval (``scipy.stats.pearsonr``), and Spearman's rho
  (``scipy.stats.spearmanr``: Pearson on average ranks) with the Fisher-z interval whose standard error is
  ``sqrt(1.06 / (n - 3))`` (Fieller, Hartley and Pearson, 1957; scipy offers no interval for rho).
- :func:`spearman_permutation_p`: the permutation p-value of Spearman's rho (exact at small n).
"""

from __future__ import annotations

import math
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
    mean, sd = out["mean"], out["sd"]
    if sd is not None and mean and sd <= 1e-12 * max(1.0, abs(mean)):
        # Every seed moved by the same nonzero amount (a discrete score: one more question of the same few): the t
        # interval is a point and would call any such difference certain. Judge it as the seeds alone can: the
        # exact sign-flip test, whose two-sided p with n agreeing seeds is 2 / 2**n (0.25 at 3 seeds).
        out.update(lo=None, hi=None, sign_p=min(1.0, 2.0 / 2 ** len(diffs)))
    return out


def direction(diff: Mapping[str, object], lower_is_better: Optional[bool]) -> str:
    """``"better"`` / ``"worse"`` when the interval excludes 0 on that side, ``"no difference"`` when it holds 0,
    ``"unknown"`` without an interval (fewer than 2 seeds) or without a value; with the same nonzero difference in
    every seed, the sign-flip test's ``sign_p`` decides instead. ``lower_is_better=None`` (a score
    with no better side, such as entropy): ``"lower"`` / ``"higher"`` instead of better / worse."""
    if diff.get("sign_p") is not None:  # equal differences in every seed (paired_difference): the sign-flip test
        if diff["sign_p"] >= 1 - CONFIDENCE:
            return "no difference"
        lo = hi = diff["mean"]
    else:
        lo, hi = diff.get("lo"), diff.get("hi")
    if lo is None or hi is None or any(isinstance(x, float) and math.isnan(x) for x in (lo, hi)):
        return "unknown"
    if hi < 0:
        return "lower" if lower_is_better is None else ("better" if lower_is_better else "worse")
    if lo > 0:
        return "higher" if lower_is_better is None else ("worse" if lower_is_better else "better")
    return "no difference"


def _finite_pairs(x: Sequence[float], y: Sequence[float]) -> List[tuple]:
    return [(float(a), float(b)) for a, b in zip(x, y)
            if a is not None and b is not None and math.isfinite(a) and math.isfinite(b)]


def _spearman_interval(rho: float, n: int, confidence: float):
    """Fisher-z interval of Spearman's rho with standard error ``sqrt(1.06 / (n - 3))`` (scipy has none); none at
    ``|rho| = 1``, where Fisher's z is infinite (``[1, 1]`` would read as a rho known exactly)."""
    if abs(rho) >= 1:
        return None, None
    z, se = math.atanh(rho), math.sqrt(1.06 / (n - 3))
    q = _st.norm.ppf(0.5 + confidence / 2)
    return math.tanh(z - q * se), math.tanh(z + q * se)


def _spearman(rx: np.ndarray, ry: np.ndarray) -> float:
    """Spearman's rho of average ranks ``rx``, ``ry``: exactly +-1 when they agree or are reversed (scipy's spearmanr
    gave 0.9999999999999999 for 22% of perfect rankings, and a perfect ranking is where Fisher's z is infinite and
    Table 1 judges by the exact p instead)."""
    if np.array_equal(rx, ry):
        return 1.0
    if np.array_equal(rx, len(rx) + 1 - ry):
        return -1.0
    return float(_st.spearmanr(rx, ry).statistic)


def correlation(x: Sequence[float], y: Sequence[float], confidence: float = CONFIDENCE) -> Dict[str, object]:
    """Pearson's r and Spearman's rho of the pairs ``(x[i], y[i])`` with finite values, each with a Fisher-z interval
    (Pearson's: ``scipy.stats.pearsonr(...).confidence_interval``, standard error ``sqrt(1 / (n - 3))``).

    Returns ``{n, pearson, pearson_lo, pearson_hi, spearman, spearman_lo, spearman_hi}`` (``None`` where a value or
    interval is undefined: fewer than 3 pairs, a constant variable; for the intervals ``n <= 3`` or a coefficient of
    ``+-1``, where Fisher's z is infinite: :func:`spearman_permutation_p` answers there).
    """
    pairs = _finite_pairs(x, y)
    n = len(pairs)
    out: Dict[str, object] = {"n": n, "pearson": None, "pearson_lo": None, "pearson_hi": None,
                              "spearman": None, "spearman_lo": None, "spearman_hi": None}
    xs, ys = np.asarray([p[0] for p in pairs]), np.asarray([p[1] for p in pairs])
    if n < 3 or np.all(xs == xs[0]) or np.all(ys == ys[0]):
        return out
    pearson, rx, ry = _st.pearsonr(xs, ys), _st.rankdata(xs), _st.rankdata(ys)
    out["pearson"], out["spearman"] = float(pearson.statistic), _spearman(rx, ry)
    if n > 3:
        if abs(out["pearson"]) < 1:
            ci = pearson.confidence_interval(confidence)
            out["pearson_lo"], out["pearson_hi"] = float(ci.low), float(ci.high)
        out["spearman_lo"], out["spearman_hi"] = _spearman_interval(out["spearman"], n, confidence)
    return out


def spearman_permutation_p(x: Sequence[float], y: Sequence[float], exact_up_to: int = 9,
                           n_resamples: int = 20000, seed: int = 0) -> Optional[float]:
    """Two-sided permutation p-value of Spearman's rho of the pairs ``(x[i], y[i])`` with finite values (the pairs
    :func:`correlation` keeps): the share of pairings of ``y`` with ``x`` whose ``|rho|`` is at least the observed
    ``|rho|``. Exact, over all ``n!`` pairings (the observed one included), for ``n <= exact_up_to``; else
    ``(hits + 1) / (n_resamples + 1)`` over ``n_resamples`` random pairings. ``None`` for fewer than 3 pairs or a
    constant variable. The small-sample companion of :func:`correlation`'s Fisher-z interval, whose normal
    approximation is rough at n < 10 and undefined at ``|rho| = 1``."""
    pairs = _finite_pairs(x, y)
    n = len(pairs)
    if n < 3 or len({a for a, _ in pairs}) < 2 or len({b for _, b in pairs}) < 2:
        return None
    cx = _st.rankdata([a for a, _ in pairs])
    cx = cx - cx.mean()

    def abs_rho(yy: np.ndarray, axis: int = -1) -> np.ndarray:  # |Pearson| on average ranks, over a batch of ys
        ry = _st.rankdata(yy, axis=axis)
        ry = ry - ry.mean(axis=axis, keepdims=True)
        return np.abs((ry * cx).sum(axis=axis)) / np.sqrt((ry ** 2).sum(axis=axis) * (cx ** 2).sum())

    res = _st.permutation_test((np.asarray([b for _, b in pairs]),), abs_rho, permutation_type="pairings",
                               vectorized=True, n_resamples=math.inf if n <= exact_up_to else n_resamples,
                               alternative="greater", rng=np.random.default_rng(seed))
    return float(min(1.0, res.pvalue))
