"""CLEX (continuous length extrapolation) against its paper's formulas and the released code's rules, written here
independently of the implementation: plain RoPE at t = 1, the NTK path at zero init, the released ODE's dynamics,
continuity in t, gradients, the training draws of t and positions and their length check. Split from
test_rope_formulas.py."""

from __future__ import annotations

import math

import pytest
import torch
from test_rope_formulas import BASE, D, plain

from torchtune_longshort.rope import CLEXRoPE, build_rope


def clex(**kw):
    args = dict(head_dim=D, max_seq_len=256, original_max_seq_len=32, t_max=8)
    args.update(kw)
    return build_rope("clex", **args)


def ntk_alpha(t, i):
    # NTK-aware frequencies with alpha = 2t - 1: base * alpha^(d/(d-2)).
    return (BASE * (2 * t - 1) ** (D / (D - 2))) ** (-2 * i / D)


def test_clex_at_t1_is_plain_rope():
    r = clex()
    with torch.no_grad():
        r.ode_down_proj.normal_()
    want = torch.tensor([plain(i) for i in range(D // 2)])
    torch.testing.assert_close(r.inv_freq_at(1), want, rtol=1e-6, atol=0)
    x = torch.randn(1, 30, 2, D)
    r.eval()
    from torchtune.modules import RotaryPositionalEmbeddings

    torch.testing.assert_close(r(x), RotaryPositionalEmbeddings(D, 256)(x))  # 30 tokens < L: t = 1


@pytest.mark.parametrize("t", [2, 3.5, 8])
def test_clex_zero_init_follows_ntk_path(t):
    r = clex()
    want = torch.tensor([ntk_alpha(t, i) for i in range(D // 2)])
    torch.testing.assert_close(r.inv_freq_at(t).detach(), want, rtol=1e-5, atol=0)


def released_clex_dynamics(r, t, z):
    """CLEX's released ``ODELinear.forward`` (clex_layer.py), re-derived per dimension in float64: the time embedding
    ``x = z + log(ntk_inv_freq(t))`` with ``alpha = 2t - 1``, ``ntk_base = base * alpha^(d/(d-2))``, and the drift
    ``delta_ntk_freq / ntk_inv_freq``, where ``delta_ntk_freq = -2 idx/(d-2) / (base^(idx/d) alpha^(idx/(d-2)+1))``."""
    up, down = r.ode_up_proj.double(), r.ode_down_proj.double()
    alpha = 2 * t - 1
    idx = torch.arange(0, D, 2, dtype=torch.float64)
    ntk_inv = 1.0 / (BASE * alpha ** (D / (D - 2))) ** (idx / D)
    delta = -2 * idx / (D - 2) / (BASE ** (idx / D) * alpha ** (idx / (D - 2) + 1))
    return torch.nn.functional.silu((z.double() + ntk_inv.log()) @ up) @ down + delta / ntk_inv


@pytest.mark.parametrize("t", [1.0, 2.5, 6.0])
def test_clex_dynamics_with_trained_weights_equal_the_released_ode(t):
    # a zero-initialised down projection hides every term inside the activation (the time embedding among them)
    r = clex()
    with torch.no_grad():
        r.ode_up_proj.normal_(std=0.3)
        r.ode_down_proj.normal_(std=0.3)
        z = torch.log(r.inv_freq_at(1)) + 0.1 * torch.randn(D // 2, generator=torch.Generator().manual_seed(0))
        got = r.dynamics(t, z)
    torch.testing.assert_close(got.double(), released_clex_dynamics(r, t, z), rtol=1e-4, atol=1e-6)


def test_clex_log_scale_is_log_of_the_length_over_log_l():
    r = clex(log_scale=True)  # L = 32
    for top in (31, 63, 200):
        positions = torch.arange(top + 1).unsqueeze(0)
        want = math.log(top + 1) / math.log(32)  # L_cur = max(position) + 1
        torch.testing.assert_close(r.query_scale(positions, 0), torch.full((1, top + 1), want), rtol=1e-6, atol=0)
    assert clex().query_scale(torch.arange(40).unsqueeze(0), 0) is None


def test_clex_frequencies_change_continuously_in_t():
    r = clex()
    with torch.no_grad():
        r.ode_down_proj.normal_(std=0.1)
        f = {t: torch.log(r.inv_freq_at(t)) for t in (1.0, 3.0, 3.1, 3.01, 3.001, 8.0)}
    d = {h: (f[3.0 + h] - f[3.0]).abs().max().item() for h in (0.1, 0.01, 0.001)}
    # The change shrinks in proportion to the step in t (Lipschitz, no jumps) ...
    assert d[0.01] < d[0.1] / 5 and d[0.001] < d[0.01] / 5 and d[0.001] < 1e-2
    # ... and the frequencies do move over the range of t.
    assert (f[8.0] - f[1.0]).abs().max() > 0.5
    # t = 1 + epsilon is close to t = 1 (the plain-RoPE start), so there is no jump at the boundary either.
    assert (torch.log(r.inv_freq_at(1.001)) - f[1.0]).abs().max() < 1e-2


def test_clex_made_under_inference_mode_runs_and_follows_a_load():
    """A CLEX model loaded inside ``torch.inference_mode()`` (``load_hf_checkpoint`` there) stopped at its first
    forward (``RuntimeError: Inference tensors do not track version counter``: the eval cache's key); its
    frequencies are now those of the same module made outside, and a later load of other weights is followed."""
    torch.manual_seed(0)
    trained = {"ode_up_proj": torch.randn(D // 2, D), "ode_down_proj": 0.1 * torch.randn(D, D // 2)}
    ref = clex().eval()
    ref.load_state_dict(trained)
    with torch.inference_mode():
        r = clex().eval()
        r.load_state_dict({k: -v for k, v in trained.items()})
        r.prepare(100, None)  # t = 4: the ODE runs
        r.load_state_dict(trained)
        r.prepare(100, None)
        got = r._state[1]
    ref.prepare(100, None)
    torch.testing.assert_close(got, ref._state[1], rtol=0, atol=0)


def test_clex_gradients_reach_its_parameters():
    torch.manual_seed(0)
    r = clex()
    with torch.no_grad():
        r.ode_down_proj.normal_(std=0.1)
    r.train()
    r.prepare(64, None, generator=torch.Generator().manual_seed(3))
    while r.current_t == 1:  # t = 1 is plain RoPE (no ODE, no gradient): draw again
        r.prepare(64, None)
    x = torch.randn(1, 64, 2, D)
    r(x).square().sum().backward()
    for p in (r.ode_up_proj, r.ode_down_proj):
        assert p.grad is not None and p.grad.abs().sum() > 0 and torch.isfinite(p.grad).all()


def test_clex_training_draws_t_and_positions():
    r = clex(time_dt=0.25)  # a coarse ODE step: this test is about the draws, not the solver
    r.train()
    g = torch.Generator().manual_seed(0)
    ts = set()
    for _ in range(40):
        r.prepare(32, None, generator=g)
        t, _, pos = r._state
        ts.add(t)
        assert pos[0] == 0 and pos[-1] == 32 * t - 1 and (pos[1:] > pos[:-1]).all()
    assert ts == set(range(1, 9))
    r.eval()
    r.prepare(100, None)
    assert r.current_t == math.ceil(100 / 32)
    r.prepare(255, None)
    assert r.current_t == 8


def test_clex_training_positions_past_twice_l_follow_the_released_rule():
    """seq_len = 64 = 2 L, t = 3: the released code's inner positions (k + 1) / 2 and its last position
    64 * 3 // 2 - 1 = 95 (it was (64 * 3 - 1) / 2 = 95.5, off the released rule whenever seq_len >= 2 L)."""
    r = clex(time_dt=0.25)
    g = torch.Generator().manual_seed(0)
    pos = r.sample_training_positions(64, 3, generator=torch.Generator().manual_seed(0))
    inner = torch.randperm(64 * 3 - 2, generator=g)[:62].sort().values.float() + 1
    assert pos[0] == 0 and pos[-1] == 95.0 and torch.equal(pos[1:-1], inner / 2)


def test_clex_t_min_floors_the_training_draws_and_leaves_inference_alone():
    r = clex(time_dt=0.25, t_min=3)
    assert r.spec()["t_min"] == 3 and "t_min" not in clex(time_dt=0.25).spec()  # the released rule keeps its spec
    r.train()
    g = torch.Generator().manual_seed(0)
    ts = set()
    for _ in range(40):
        r.prepare(32, None, generator=g)
        ts.add(r.current_t)
    assert ts == set(range(3, 9))
    r.eval()
    r.prepare(40, None)
    assert r.current_t == 2  # inference still reads ceil(length / L)
    for bad in (0, 9, 2.5, True):
        with pytest.raises(ValueError, match=r"t_min=.* is not accepted: expected an integer in \[1, t_max=8\]"):
            clex(t_min=bad)


def test_clex_training_length_check_agrees_with_the_positions_it_draws():
    # seq_len between L and 2 L passed every check, then failed at whichever step first drew a t large enough
    # ("positions reach 3071 >= max_seq_len=2048"), and its advice (max_seq_len >= seq_len * t_max) moved t_max too
    import re

    import torch

    rope = CLEXRoPE(16, 2048, original_max_seq_len=512, t_max=4)
    for seq_len in list(range(2, 2100, 37)) + [512, 768, 1024, 1536, 2048]:
        top = max(float(rope._host_training_positions(seq_len, t, torch.Generator().manual_seed(s)).max())
                  for t in range(1, rope.t_max + 1) for s in range(8))  # what the sampler draws
        try:
            rope.check_training_length(seq_len)
        except ValueError as e:
            error = e
        else:
            assert top < rope.max_seq_len, seq_len  # never passes a length whose draws can fail
            continue
        assert re.match(rf"seq_len={seq_len}: CLEX's training positions reach \d+ at t_max=4", str(error))
        multiple, t_fit = map(int, re.search(r"\(e\.g\. (\d+)\), or set the model's t_max to (\d+)$",
                                             str(error)).groups())
        CLEXRoPE(16, 2048, original_max_seq_len=512, t_max=t_fit).check_training_length(seq_len)  # each fix works
        if multiple <= 2048:
            rope.check_training_length(multiple)
    with pytest.raises(ValueError, match=r"seq_len=768: .* reach 3071 .* multiple of 512 \(e\.g\. 1024\), or set "
                                         r"the model's t_max to 2$"):
        rope.check_training_length(768)
