"""CLEX's frequency ODE solved, against references written here: a closed-form ODE for the RK4 solver itself (its
error and its order), and scipy's solve_ivp at tight tolerance for CLEX's own z(t) with trained weights.

The existing CLEX tests solve the ODE only at zero init, where g(z, t) does not depend on z: every RK4 stage then
sees the same value whatever z it is given, so hand mutants giving k2 or k3 the wrong z, or weighting them 3 and
1 for 2 and 2, survived them (mutants13)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from scipy.integrate import solve_ivp
from test_rope_clex import clex, released_clex_dynamics
from test_rope_formulas import BASE, D

from torchtune_longshort.rope.ode import rk4_solve


def exact(t, z0=1.5, t0=0.0):
    # dz/dt = z cos(t): z(t) = z0 exp(sin t - sin t0)
    return z0 * math.exp(math.sin(t) - math.sin(t0))


def solve(step, t1=2.0):
    z0 = torch.tensor([1.5], dtype=torch.float64)
    return float(rk4_solve(lambda t, z: z * math.cos(t), z0, 0.0, t1, step))


def test_rk4_is_fourth_order_on_a_closed_form():
    errors = [abs(solve(h) - exact(2.0)) for h in (0.2, 0.1, 0.05)]
    assert errors[1] < 2e-6  # the classic scheme's error at h = 0.1
    for coarse, fine in zip(errors, errors[1:]):
        assert 12 < coarse / fine < 20  # halving h divides the error by 2^4 = 16


def test_rk4_steps_are_equal_and_at_most_the_step_given():
    for t1, step, n in [(2.0, 0.3, 7), (2.0, 0.5, 4), (1.0, 0.01, 100), (1.0, 2.0, 1)]:
        seen = []
        rk4_solve(lambda t, z: seen.append(t) or z, torch.zeros(1), 0.0, t1, step)
        assert len(seen) == 4 * n, (t1, step)  # four stages a step: ceil(t1 / step) steps
        starts = seen[::4]
        assert starts[0] == 0.0 and all(b - a == pytest.approx(t1 / n) for a, b in zip(starts, starts[1:]))


@pytest.mark.parametrize("t", [2.0, 5.0])
def test_clex_frequencies_with_trained_weights_are_the_odes_solution(t):
    r = clex(time_dt=0.05)
    g = torch.Generator().manual_seed(1)
    with torch.no_grad():
        r.ode_up_proj.copy_(torch.randn(r.ode_up_proj.shape, generator=g) * 0.3)
        r.ode_down_proj.copy_(torch.randn(r.ode_down_proj.shape, generator=g) * 0.05)
        got = r.inv_freq_at(t).double()

    def rhs(s, z):
        with torch.no_grad():
            return released_clex_dynamics(r, s, torch.from_numpy(z)).numpy()

    z1 = np.log(BASE) * -np.arange(0, D, 2) / D  # z(1) = log theta
    ref = solve_ivp(rhs, (1.0, t), z1, method="DOP853", rtol=1e-11, atol=1e-12).y[:, -1]
    # float32 RK4 at h = 0.05: a few 1e-6 of z; the mutants' schemes are off by more than 1e-4
    torch.testing.assert_close(got.log(), torch.from_numpy(ref), rtol=0, atol=2e-5)
