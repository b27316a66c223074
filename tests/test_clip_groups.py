"""Gradient clipping with CLEX's trainable RoPE: one group (torchtune's rule) or the RoPE as its own group.

CLEX's ODE gradient grows with the positions (d angle / d log frequency is the angle itself), so in one group its
norm sets the clipping factor of every other gradient. The reference is the clipping rule written out by hand.
"""

import math

import pytest
import torch
from torch import nn

from torchtune_longshort.rope.clex import CLEXRoPE
from torchtune_longshort.training.step_checks import clip_gradient_norms, rope_parameters


class _Tiny(nn.Module):
    def __init__(self):
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.rope = CLEXRoPE(8, 64, original_max_seq_len=16, t_max=4)


def _with_grads(model, model_grad: float, rope_grad: float):
    """Every non-RoPE gradient entry = model_grad, every RoPE entry = rope_grad; returns their norms."""
    rope = {id(p) for p in rope_parameters(model)}
    n_model = n_rope = 0
    for p in model.parameters():
        p.grad = torch.full_like(p, rope_grad if id(p) in rope else model_grad)
        if id(p) in rope:
            n_rope += p.numel()
        else:
            n_model += p.numel()
    return model_grad * math.sqrt(n_model), rope_grad * math.sqrt(n_rope)


def _norm(params):
    return math.sqrt(sum(float(p.grad.pow(2).sum()) for p in params))


def test_rope_parameters_are_the_ode_weights():
    m = _Tiny()
    assert {id(p) for p in rope_parameters(m)} == {id(m.rope.ode_up_proj), id(m.rope.ode_down_proj)}


@pytest.mark.parametrize("separately", [False, True])
def test_clipping_one_group_or_the_rope_on_its_own(separately):
    m = _Tiny()
    model_norm, rope_norm = _with_grads(m, 0.01, 100.0)  # model well under max_norm, RoPE far over it
    others = [m.proj.weight, m.proj.bias]
    out = clip_gradient_norms(m, 1.0, rope_separately=separately)
    assert float(out["rope_grad_norm"]) == pytest.approx(rope_norm, rel=1e-5)  # measured before clipping
    if separately:
        assert float(out["grad_norm"]) == pytest.approx(model_norm, rel=1e-5)
        assert _norm(others) == pytest.approx(model_norm, rel=1e-5)  # untouched: under max_norm on its own
        assert _norm(rope_parameters(m)) == pytest.approx(1.0, rel=1e-4)
    else:
        total = math.hypot(model_norm, rope_norm)
        assert float(out["grad_norm"]) == pytest.approx(total, rel=1e-5)
        # torch's rule: every gradient times max_norm / (total + 1e-6); the model's shrinks with the RoPE's norm
        assert _norm(others) == pytest.approx(model_norm / (total + 1e-6), rel=1e-4)


def test_a_model_without_trainable_rope_logs_only_grad_norm():
    m = nn.Linear(4, 3)
    for p in m.parameters():
        p.grad = torch.ones_like(p)
    out = clip_gradient_norms(m, None, rope_separately=True)
    assert set(out) == {"grad_norm"} and float(out["grad_norm"]) == pytest.approx(math.sqrt(15))
