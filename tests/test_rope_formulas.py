"""RoPE methods against their papers' formulas, written here independently of the implementation
(plain Python math per dimension / per position), plus the bad-input errors."""

from __future__ import annotations

import math
import re

import pytest
import torch

from torchtune_longshort.rope import (
    POSITION_SAMPLERS,
    ROPE_METHODS,
    build_position_sampler,
    build_rope,
    eabf_query_scale,
)

D = 16
BASE = 10_000.0


def plain(i, d=D, base=BASE):
    return base ** (-2 * i / d)


def test_registry_names():
    assert set(ROPE_METHODS) >= {"linear", "ntk", "dynamic_ntk", "yarn", "abf", "eabf", "clex", "llama3"}
    assert set(POSITION_SAMPLERS) == {"random_pos", "pose"}


def test_linear_divides_every_frequency_by_the_factor():
    r = build_rope("linear", head_dim=D, max_seq_len=64, factor=3.0)
    want = torch.tensor([plain(i) / 3.0 for i in range(D // 2)])
    torch.testing.assert_close(r.theta, want, rtol=1e-6, atol=0)


def test_ntk_keeps_highest_and_divides_lowest_frequency_by_factor():
    # bloc97's NTK-aware rule: base' = base * s^(d/(d-2)); equivalently theta_0 unchanged and
    # theta_{d/2-1} = theta_{d/2-1} / s.
    s = 4.0
    r = build_rope("ntk", head_dim=D, max_seq_len=64, factor=s)
    new_base = BASE * s ** (D / (D - 2))
    want = torch.tensor([new_base ** (-2 * i / D) for i in range(D // 2)])
    torch.testing.assert_close(r.theta, want, rtol=1e-6, atol=0)
    assert r.theta[0].item() == pytest.approx(1.0)
    assert r.theta[-1].item() == pytest.approx(plain(D // 2 - 1) / s, rel=1e-5)


def test_dynamic_ntk_base_follows_length():
    r = build_rope("dynamic_ntk", head_dim=D, max_seq_len=256, factor=2.0, original_max_seq_len=64)
    assert r.base_for_length(64) == BASE
    L = 200
    assert r.base_for_length(L) == pytest.approx(BASE * (2.0 * L / 64 - 1.0) ** (D / (D - 2)))
    # Forward at length L rotates with that base: compare against a hand-rolled interleaved rotation.
    x = torch.randn(1, L, 1, D)
    out = r(x)
    b = r.base_for_length(L)
    p, i = 150, 3
    ang = p * b ** (-2 * i / D)
    x0, x1 = x[0, p, 0, 2 * i].item(), x[0, p, 0, 2 * i + 1].item()
    assert out[0, p, 0, 2 * i].item() == pytest.approx(x0 * math.cos(ang) - x1 * math.sin(ang), abs=1e-5)
    assert out[0, p, 0, 2 * i + 1].item() == pytest.approx(x1 * math.cos(ang) + x0 * math.sin(ang), abs=1e-5)


def test_abf_uses_the_new_base():
    r = build_rope("abf", head_dim=D, max_seq_len=64, new_base=500_000.0)
    want = torch.tensor([500_000.0 ** (-2 * i / D) for i in range(D // 2)])
    torch.testing.assert_close(r.theta, want, rtol=1e-6, atol=0)


def test_eabf_query_factor_per_position():
    L = 16
    pos = torch.arange(100)
    got = eabf_query_scale(pos, L)
    want = torch.tensor([max(1.0, math.log(p + 1) / math.log(L)) for p in range(100)])
    torch.testing.assert_close(got, want)
    assert got[: L - 1].eq(1).all() and got[L - 1].item() == pytest.approx(1.0) and got[99] > 1
    r = build_rope("eabf", head_dim=D, max_seq_len=128, original_max_seq_len=L)
    assert r.query_scale(pos, 0) is None and r.query_scale(pos, 1) is None
    torch.testing.assert_close(r.query_scale(pos, 2), want)
    r0 = build_rope("eabf", head_dim=D, max_seq_len=128, original_max_seq_len=L, exempt_layers=0)
    torch.testing.assert_close(r0.query_scale(pos, 0), want)


def test_yarn_frequencies_follow_the_ntk_by_parts_rule():
    s, L, alpha, beta = 4.0, 64, 1.0, 32.0
    r = build_rope("yarn", head_dim=D, max_seq_len=256, factor=s, original_max_seq_len=L)
    for i in range(D // 2):
        rotations = L / (2 * math.pi / plain(i))
        got = r.theta[i].item()
        if rotations > beta + 1:  # clearly in the extrapolated band (beyond the ramp's rounding)
            assert got == pytest.approx(plain(i), rel=1e-5)
        elif rotations < alpha / 2:  # clearly interpolated
            assert got == pytest.approx(plain(i) / s, rel=1e-5)
        else:
            assert plain(i) / s - 1e-9 <= got <= plain(i) + 1e-9
    assert r.attention_scaling == pytest.approx(0.1 * math.log(s) + 1)


def test_llama3_equals_torchtune_module():
    from torchtune.models.llama3_1._position_embeddings import Llama3ScaledRoPE

    ref = Llama3ScaledRoPE(D, 128, base=500_000, scale_factor=8, old_context_len=32)
    r = build_rope("llama3", head_dim=D, max_seq_len=128, base=500_000.0, factor=8, original_max_seq_len=32)
    x = torch.randn(2, 100, 3, D)
    assert torch.equal(r(x), ref(x))


# ---- CLEX -----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["linear", "ntk", "yarn", "llama3", "dynamic_ntk"])
def test_default_factor_is_the_target_over_the_original_length(method):
    # L'/L = 6144 / 4096 = 1.5 (a floor division gave 1: no scaling at all)
    kwargs = ROPE_METHODS[method].default_kwargs(6144, 4096)
    assert kwargs["factor"] == 1.5
    assert kwargs.get("original_max_seq_len", 4096) == 4096


# ---- samplers -------------------------------------------------------------------------------------------

def test_random_pos_is_a_uniform_sorted_subset():
    s, Lmax, n = 8, 40, 4000
    pos = build_position_sampler("random_pos", max_position=Lmax).sample(n, s, torch.Generator().manual_seed(0))
    assert pos.shape == (n, s) and pos.dtype == torch.long
    assert (pos[:, 1:] > pos[:, :-1]).all() and pos.min() >= 0 and pos.max() < Lmax
    # Each position belongs to a uniformly random s-subset with probability s / Lmax.
    freq = torch.bincount(pos.flatten(), minlength=Lmax).float() / n
    assert (freq - s / Lmax).abs().max() < 0.04


def test_pose_chunks_are_consecutive_with_skips_inside_target():
    target, s, N = 100, 20, 3
    pos = build_position_sampler("pose", target_len=target, num_chunks=N).sample(500, s, torch.Generator().manual_seed(0))
    assert pos.shape == (500, s) and pos[:, 0].eq(0).all() and pos.max() < target
    gaps = pos[:, 1:] - pos[:, :-1]
    assert (gaps >= 1).all()
    assert ((gaps > 1).sum(1) <= N - 1).all()  # at most N-1 jumps: N chunks of consecutive ids
    assert (gaps > 1).any()  # skips do happen
    assert pos[:, -1].max() > target - 5  # and reach the end of the target range


@pytest.mark.parametrize("s", [16, 15])
def test_pose_two_chunks_follow_the_released_rule(s):
    """train_pose.py: ``rt1 = randint(1, (len_chunk + 1) // 2)`` (first chunk at most half the window, inclusive),
    ``rt = randint(0, target - len)`` (the second chunk's skip). The first chunk was uniform on 1..s-1. An odd
    window tells ``(s + 1) // 2`` from ``s // 2``."""
    target = 100
    pos = build_position_sampler("pose", target_len=target).sample(4000, s, torch.Generator().manual_seed(0))
    gaps = pos[:, 1:] - pos[:, :-1]
    jumped = gaps.ne(1).any(1)
    first = torch.where(jumped, gaps.ne(1).int().argmax(1) + 1, torch.full_like(pos[:, 0], -1))[jumped]
    assert set(first.tolist()) == set(range(1, 9))  # 1..(s + 1) // 2 = 8 for 16 and 15, each drawn
    skips = pos[:, -1] - (s - 1)
    assert skips.min() == 0 and skips.max() == target - s and abs(skips.float().mean() - (target - s) / 2) < 1.5


def test_build_rope_without_a_base_takes_the_methods_own_default():
    """Llama-3's module documents base 500000; build_rope passed its own 10000 to every method."""
    assert build_rope("llama3", head_dim=D, max_seq_len=64).base == 500_000.0
    assert build_rope("linear", head_dim=D, max_seq_len=64, factor=2).base == 10_000.0
    assert build_rope("llama3", head_dim=D, max_seq_len=64, base=BASE).base == BASE


# ---- errors ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "method,kwargs,match",
    [
        ("linear", dict(factor=0.5), "factor=0.5"),
        ("ntk", dict(factor=0.9), "factor=0.9"),
        ("yarn", dict(factor=2, original_max_seq_len=32, alpha=32, beta=1), "beta > alpha"),
        ("yarn", dict(factor=2, original_max_seq_len=32, alpha=2, beta=2), "beta > alpha"),
        ("clex", dict(original_max_seq_len=32, t_max=0), "t_max=0"),
        ("clex", dict(original_max_seq_len=32, t_max=0.5), "t_max=0.5"),
        ("yarn", dict(factor=2, original_max_seq_len=32, attention_factor=float("inf")), "attention_factor=inf"),
        ("yarn", dict(factor=2, original_max_seq_len=32, attention_factor="1"), "attention_factor='1'"),
        ("yarn", dict(factor=2, original_max_seq_len=32, attention_factor=True), "attention_factor=True"),
        ("yarn", dict(factor=2, original_max_seq_len=32, beta=float("inf")), "beta=inf"),
        ("yarn", dict(factor=2, original_max_seq_len=32, truncate="no"), "truncate='no' .* true or false"),
        ("llama3", dict(low_freq_factor="1"), "low_freq_factor='1'"),
        ("llama3", dict(high_freq_factor=float("inf")), "high_freq_factor=inf"),
        ("longrope", dict(short_factor=[1.0] * 8, long_factor=[1.0] * 8, factor=2, original_max_seq_len=1),
         "original_max_seq_len=1"),
        ("longrope", dict(short_factor=[1.0] * 8, long_factor=[1.0] * 8, factor=2, original_max_seq_len=32,
                          attention_factor=float("nan")), "attention_factor=nan"),
        ("clex", dict(original_max_seq_len=32, t_max=8, log_scale="yes"), "log_scale='yes'"),
        ("nope", {}, "method='nope' is not a RoPE method"),
        ("random_pos", {}, "position-id sampler"),
    ],
)
def test_bad_config_values_fail_clearly(method, kwargs, match):
    with pytest.raises(ValueError, match=match):
        build_rope(method, head_dim=D, max_seq_len=256, **kwargs)


@pytest.mark.parametrize("head_dim", [15, 0, -4])
def test_odd_or_nonpositive_head_dim_fails(head_dim):
    with pytest.raises(ValueError, match=f"head_dim={head_dim}"):
        build_rope("linear", head_dim=head_dim, max_seq_len=64, factor=2)


def test_positions_past_the_cache_fail_clearly():
    r = build_rope("yarn", head_dim=D, max_seq_len=64, factor=2, original_max_seq_len=32)
    with pytest.raises(ValueError, match="max_seq_len=64"):
        r(torch.randn(1, 65, 1, D))
    with pytest.raises(ValueError, match="max_seq_len=64"):
        r(torch.randn(1, 1, 1, D), input_pos=torch.tensor([[64]]))
    # a [b, s, h_d] tensor (no heads) came back [b, s, s, h_d]; another head_dim failed in the rotation
    for bad in (torch.randn(1, 4, D), torch.randn(1, 4, 2, D - 2), torch.ones(1, 4, 2, D, dtype=torch.long)):
        with pytest.raises(ValueError, match=rf"^YaRNRoPE: x has shape {re.escape(str(tuple(bad.shape)))} and dtype "
                                             rf"{bad.dtype}: expected a floating \[batch, seq_len, num_heads, "
                                             rf"head_dim={D}\] tensor"):
            r(bad)


def test_positions_are_read_from_the_device_once_per_model_call(monkeypatch):
    """torchtune's decoder hands one ``input_pos`` to every layer, and each layer's q and k ask the RoPE to check
    it: read with ``int(max)`` and ``int(min)`` each time, that was 4 device-to-host syncs per layer on a GPU (a
    KV-cached generation step runs all layers for one token). Now once per tensor; an in-place change or a new
    tensor is read again, so a position past the cache is still refused; the RoPE still pickles and copies."""
    import copy
    import io

    from rope_helpers import linear_llama2, position_reads

    reads, model = position_reads(monkeypatch), linear_llama2(num_layers=3)
    tokens, pos = torch.randint(0, 64, (1, 8)), torch.arange(8)[None]
    with torch.no_grad():
        ref = model(tokens, input_pos=pos)
        assert len(reads) == 1, reads  # 3 layers x (q, k): 6 calls
        torch.testing.assert_close(model(tokens), ref)  # the positions it was given are the ones it used
        model(tokens, input_pos=pos.clone())
        assert len(reads) == 2
        pos.add_(60)  # in place: the version counter moves, the range is read again
        with pytest.raises(ValueError, match=r"input_pos spans \[60, 67\]"):
            model(tokens, input_pos=pos)
    torch.save(model.layers[0].attn.pos_embeddings, io.BytesIO())  # torchtune's whole model does not pickle
    copy.deepcopy(model)


def test_unknown_kwarg_names_the_method():
    with pytest.raises(TypeError, match="rope method 'linear'"):
        build_rope("linear", head_dim=D, max_seq_len=64, factor=2, beta=3)


# ---- the rotation itself ----------------------------------------------------------------------------------
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_interleaved_rotation_is_the_real_formula_bit_for_bit_with_its_gradient(dtype):
    """``rotate`` (eager: one complex multiply) against the rotation written out per pair in float32 (Meta's
    Llama, torchtune's module): the same values and the same input gradient, to the bit, on a CPU."""
    from torchtune_longshort.rope import rotate

    torch.manual_seed(0)
    s, h, d = 300, 3, 64
    angles = torch.rand(s, d // 2, dtype=torch.float64) * 500
    cos, sin = angles.cos().float().view(1, s, 1, d // 2), angles.sin().float().view(1, s, 1, d // 2)
    x = torch.randn(2, s, h, d, dtype=dtype)
    x_ref, x_got = x.clone().requires_grad_(True), x.clone().requires_grad_(True)
    pairs = x_ref.float().reshape(2, s, h, d // 2, 2)
    x0, x1 = pairs[..., 0], pairs[..., 1]
    want = torch.stack([x0 * cos - x1 * sin, x1 * cos + x0 * sin], dim=-1).flatten(3).to(dtype)
    got = rotate(x_got, cos, sin, "interleaved")
    assert got.dtype == dtype and got.shape == x.shape
    assert torch.equal(got, want)
    g = torch.randn_like(want)
    want.backward(g)
    got.backward(g)
    assert torch.equal(x_got.grad, x_ref.grad)
    # cos/sin not in float32 (a caller's own) take the real formula: no complex bf16 exists
    c16, s16 = cos.bfloat16(), sin.bfloat16()
    p = x.float().reshape(2, s, h, d // 2, 2)
    want16 = torch.stack([p[..., 0] * c16 - p[..., 1] * s16, p[..., 1] * c16 + p[..., 0] * s16], -1).flatten(3)
    assert torch.equal(rotate(x, c16, s16, "interleaved"), want16.to(dtype))
