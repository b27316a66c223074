"""CLEX at inference: the t it reads past its trained range, the frequencies it caches between calls, and the t_max
it derives for a length that is not a multiple of L. Hand mutants of each survived the CLEX tests (mutants13); the
references are the module docstring's rule written here, a fresh module given the same weights, and the
constructor's own bound L * t_max <= max_seq_len."""

from __future__ import annotations

import math

import torch
from test_rope_clex import clex
from test_rope_formulas import D

from torchtune_longshort.rope import CLEXRoPE


def trained(r, seed=0):
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        r.ode_up_proj.copy_(torch.randn(r.ode_up_proj.shape, generator=g) * 0.3)
        r.ode_down_proj.copy_(torch.randn(r.ode_down_proj.shape, generator=g) * 0.05)
    return r


def test_inference_past_l_times_t_max_reads_t_max():
    # t = ceil(L_cur / L) capped at t_max: 400 tokens at L = 32 is 13, read as t_max = 8 (an uncapped t ran the ODE
    # past the range it was trained on)
    r = trained(clex(max_seq_len=512, time_dt=0.25)).eval()
    for length in (255, 256, 257, 400, 512):
        r.prepare(length, None)
        assert r.current_t == min(math.ceil(length / 32), 8), length
    torch.testing.assert_close(r._state[1], r.inv_freq_at(8).detach(), rtol=0, atol=0)


def test_eval_frequencies_follow_an_in_place_step_of_the_ode_weights():
    # an optimizer step changes the weights in place (no load): a validation pass after it must not read the
    # frequencies cached before it
    r = trained(clex(time_dt=0.25)).eval()
    r.prepare(100, None)  # t = 4: solved and cached
    before = r._state[1].clone()
    with torch.no_grad():
        r.ode_down_proj.add_(0.05)
    r.prepare(100, None)
    fresh = clex(time_dt=0.25).eval()
    fresh.load_state_dict(r.state_dict())
    fresh.prepare(100, None)
    assert not torch.equal(r._state[1], before)
    torch.testing.assert_close(r._state[1], fresh._state[1], rtol=0, atol=0)


def test_default_t_max_is_the_largest_that_max_seq_len_holds():
    for max_seq_len, L in [(100, 32), (256, 32), (95, 32), (31, 32)]:
        want = max([1] + [t for t in range(1, max_seq_len + 1) if L * t <= max_seq_len])
        kw = CLEXRoPE.default_kwargs(max_seq_len, L)
        assert kw["t_max"] == want, (max_seq_len, L)
        if L * want <= max_seq_len:
            assert CLEXRoPE(D, max_seq_len, **kw).t_max == want  # and it builds
