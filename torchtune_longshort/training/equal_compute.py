"""Equal-compute comparison (paper Appendix F): give the ``alpha > 0`` run fewer steps, in proportion to its
measured per-step overhead, so that it spends the baseline's compute.

The paper compares 50 / 100 / 200 baseline steps with 47 / 95 / 190 steps of the regularized run, i.e. a 5.3%
overhead per step with the result floored. Measure your own overhead with ``benchmarks/loss_overhead.py`` (time of
``a=0.1`` over ``a=0`` on your shape and device) or from the two runs' logged step times.
"""

from __future__ import annotations

import math


def equal_compute_steps(baseline_steps: int, overhead: float) -> int:
    """Steps for the regularized run: ``floor(baseline_steps / overhead)``.

    Args:
        baseline_steps: the ``alpha = 0`` run's steps.
        overhead: measured step time of ``alpha > 0`` over ``alpha = 0`` (>= 1).

    Returns:
        an int >= 1.
    """
    if not isinstance(baseline_steps, int) or baseline_steps < 1:
        raise ValueError(f"max_steps={baseline_steps!r} must be an int >= 1")
    if not isinstance(overhead, (int, float)) or not math.isfinite(overhead) or overhead < 1:
        raise ValueError(
            f"equal_compute_overhead={overhead!r} must be a measured step-time ratio >= 1 (e.g. 1.0526 for the "
            "paper's 5%)"
        )
    return max(1, math.floor(baseline_steps / overhead + 1e-9))


def trained_steps(max_steps: int, overhead, alpha: float) -> int:
    """The steps a recipe config really trains: ``max_steps``, or :func:`equal_compute_steps` of it when
    ``equal_compute_overhead`` is set and the run is regularized (``alpha > 0``). The recipe and the study ask this."""
    if overhead is None or not alpha > 0:
        return int(max_steps)
    return equal_compute_steps(int(max_steps), overhead)
