"""Closed-form test errors of the App. C.1 linear-attention model (paper Theorem 3.1) and an exact numerical check.

Setting: bits iid Bernoulli(1/2), training lengths l ~ U{1..L} (L = l_train), MSE loss, the model class
{A + B * m : A, B real} with m = mean of the bits (``LinearAttentionModel(query="eos")`` spans exactly this class).
The population least-squares solution on the training distribution, evaluated at a test length l:

- mean task (y = m):   A = 0, B = 1 -> E(l) = 0.
- length task (y = l): m carries no information on l (E[m | l] = 1/2 for every l), so the best fit is the constant
  E[l_train] = (L+1)/2 and E(l) = (l - (L+1)/2)^2 (the paper's Theorem 3.1; 1980.25 at l = 50, L = 10).
- sum task (y = s = l*m): with H = 1 / E[1/l_train] (harmonic mean of the training lengths) and lbar = E[l_train],
  Cov(s, m) = E[l * Var(m|l)] = 1/4 and Var(m) = E[1/(4 l)], so B = H and A = (lbar - H)/2. At test length l the error
  uses the binomial second moment E[m^2 | l] = 1/4 + 1/(4l) = (l+1)/(4l):

      E(l) = A^2 + 2 A (B - l) E[m] + (B - l)^2 E[m^2] = A^2 + A (B - l) + (B - l)^2 (l+1)/(4l)
           = (l - lbar)^2 / 4 + (l - H)^2 / (4l).

  ``sum_error_closed_form(..., second_moment="doubled")`` returns the same expression with (l+1)/(2l) in place of
  (l+1)/(4l) -- the factor-2 variant the issue reports for the paper's printed constant -- so runs can be held
  against both.

``exact_class_optimum`` recomputes all of these without algebra: it enumerates every (l, number of ones, last bit)
with its exact probability, solves the weighted least-squares problem over the model's feature map, and evaluates the
exact expected error at each test length; it also covers ``query="last"`` (class A(x_l) + B(x_l) * m), which has no
closed form here.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from .tasks import check_task


def _check(l_train: int, l_test: int) -> None:
    if l_train < 1:
        raise ValueError(f"l_train={l_train} must be >= 1")
    if l_test < l_train:
        raise ValueError(f"l_test={l_test} < l_train={l_train}: the test range must contain the training range")


def length_error_closed_form(l: np.ndarray | int, l_train: int) -> np.ndarray:
    """Theorem 3.1, length task: E(l) = (l - (l_train + 1)/2)^2."""
    l = np.asarray(l, dtype=np.float64)
    return (l - (l_train + 1) / 2.0) ** 2


def sum_error_closed_form(l: np.ndarray | int, l_train: int, second_moment: str = "binomial") -> np.ndarray:
    """Sum task: E(l) = A^2 + A (H - l) + (H - l)^2 * c(l), H = harmonic mean of 1..l_train, A = (lbar - H)/2.

    second_moment: ``"binomial"`` uses c(l) = E[m^2 | l] = (l+1)/(4l) (our derivation); ``"doubled"`` uses (l+1)/(2l).
    """
    if second_moment not in ("binomial", "doubled"):
        raise ValueError(f"second_moment={second_moment!r} is unknown; accepted: binomial, doubled")
    l = np.asarray(l, dtype=np.float64)
    ls = np.arange(1, l_train + 1, dtype=np.float64)
    lbar, H = ls.mean(), 1.0 / np.mean(1.0 / ls)
    A = (lbar - H) / 2.0
    c = (l + 1) / (4 * l) if second_moment == "binomial" else (l + 1) / (2 * l)
    return A * A + A * (H - l) + (H - l) ** 2 * c


def _states(l: int):
    """All (n_ones, last_bit, prob) for l iid fair bits."""
    out = []
    for n in range(l + 1):
        for last in (0, 1):
            # sequences with n ones whose last bit is `last`: C(l-1, n-last)
            k = n - last
            if 0 <= k <= l - 1:
                out.append((n, last, math.comb(l - 1, k) / 2.0**l))
    return out


def _features(m: float, last: int, query: str) -> list[float]:
    return [1.0, m] if query == "eos" else [1.0, float(last), m, last * m]


def _target(task: str, l: int, n: int) -> float:
    return {"mean": n / l, "length": float(l), "sum": float(n)}[task]


def exact_class_optimum(task: str, l_train: int, l_test: int, query: str = "eos") -> dict:
    """Exact population least squares of the App. C.1 model class, by enumeration (no closed form used).

    Returns ``{"coef": [...], "test_lengths": [1..l_test], "error": [E(l) for each l]}`` (iid fair bits,
    training lengths uniform in 1..l_train, identity target).
    """
    check_task(task)
    _check(l_train, l_test)
    if query not in ("eos", "last"):
        raise ValueError(f"query={query!r} is unknown; accepted: eos, last")
    X, y, w = [], [], []
    for l in range(1, l_train + 1):
        for n, last, p in _states(l):
            X.append(_features(n / l, last, query))
            y.append(_target(task, l, n))
            w.append(p / l_train)
    X, y, w = np.array(X), np.array(y), np.array(w)
    sw = np.sqrt(w)
    coef, *_ = np.linalg.lstsq(X * sw[:, None], y * sw, rcond=None)
    errs = []
    for l in range(1, l_test + 1):
        errs.append(sum(p * (np.dot(coef, _features(n / l, last, query)) - _target(task, l, n)) ** 2
                        for n, last, p in _states(l)))
    return {"coef": coef.tolist(), "test_lengths": list(range(1, l_test + 1)), "error": errs}


def fit_power_law(x: Sequence[float], y: Sequence[float]) -> dict:
    """Least-squares fit of log y = log c + p log x (x, y > 0). Returns ``{"exponent": p, "coef": c, "r2": R^2}``.

    Used for Theorem 3.1's claim that the length task's error grows quadratically in (l_test - l_train).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if x.size < 2 or np.any(x <= 0) or np.any(y <= 0):
        raise ValueError("fit_power_law needs >= 2 points with x > 0 and y > 0")
    lx, ly = np.log(x), np.log(y)
    p, logc = np.polyfit(lx, ly, 1)
    resid = ly - (p * lx + logc)
    r2 = 1.0 - resid.var() / ly.var() if ly.var() > 0 else 1.0
    return {"exponent": float(p), "coef": float(np.exp(logc)), "r2": float(r2)}


def fit_shifted_square(l: Sequence[float], mse: Sequence[float]) -> dict:
    """Fit sqrt(MSE) = a * (l - c) by least squares. a ~ 1 means the error is (l - c)^2: the model's prediction is
    stuck at the constant c beyond training (Theorem 3.1 has c = (l_train + 1)/2 for the App. C.1 model).
    Returns ``{"slope": a, "stuck_at": c, "r2": R^2}``."""
    l, r = np.asarray(l, dtype=np.float64), np.sqrt(np.asarray(mse, dtype=np.float64))
    if l.size < 2:
        raise ValueError("fit_shifted_square needs >= 2 points")
    a, b = np.polyfit(l, r, 1)
    resid = r - (a * l + b)
    # a flat error (Fig. 1b's beyond-range MSE can be) is stuck at no length: NaN, not numpy's divide-by-zero
    # warning and -b/a of a rounding-sized slope (polyfit gives ~1e-16 for a constant); a constant fits exactly: R^2 1
    scale = float(np.max(np.abs(r)))
    flat = abs(a) * np.ptp(l) <= 1e-9 * scale
    r2 = 1.0 if r.var() <= (1e-9 * scale) ** 2 else 1.0 - resid.var() / r.var()
    return {"slope": 0.0 if flat else float(a), "stuck_at": float("nan") if flat else float(-b / a), "r2": float(r2)}
