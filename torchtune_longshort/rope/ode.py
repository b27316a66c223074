"""Fixed-step ODE integration for RoPE methods whose frequencies follow an ODE (CLEX's ``dz/dt = g(z, t)``).

Classic Runge-Kutta 4 with ``ceil(span / time_dt)`` equal steps. The released CLEX code runs torchdiffeq's fixed-grid
``rk4`` with ``step_size = time_dt``, which steps by the 3/8 rule (its ``rk4_alt_step_func``) on a grid of steps exactly
``time_dt`` long with a shorter last one: another fourth-order method on another grid, so the two agree to the methods'
truncation error, not bit for bit. The solution is a plain function of its inputs, differentiable by autograd through
every step (no adjoint).
"""

from __future__ import annotations

import math
from typing import Callable

import torch


def rk4_solve(func: Callable, z0: torch.Tensor, t0: float, t1: float, step: float) -> torch.Tensor:
    """Classic fixed-step Runge-Kutta 4 from ``t0`` to ``t1`` with steps of at most ``step`` (float32)."""
    n = max(1, math.ceil((t1 - t0) / step - 1e-9))
    h = (t1 - t0) / n
    z = z0
    t = t0
    for _ in range(n):
        k1 = func(t, z)
        k2 = func(t + h / 2, z + h / 2 * k1)
        k3 = func(t + h / 2, z + h / 2 * k2)
        k4 = func(t + h, z + h * k3)
        z = z + h / 6 * (k1 + 2 * k2 + 2 * k3 + k4)
        t = t + h
    return z
