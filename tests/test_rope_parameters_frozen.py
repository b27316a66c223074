"""Which RoPE parameters the recipe treats as learned (``step_checks.rope_parameters``, ``learned_rope``), where the
existing tests (tests/test_clip_groups.py) build only a trainable CLEX: a CLEX whose ODE weights are frozen has no
trainable RoPE parameters (torch's own ``requires_grad`` is the reference: no ``rope_grad_norm`` to log, nothing
clipped as its own group), a plain RoPE module holds no learned parameters at all (no generator, nothing drawn),
and drawing a new run's CLEX weights leaves the run's own random stream as torch had it."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from torchtune_longshort.rope.base import DefaultRoPE
from torchtune_longshort.rope.clex import CLEXRoPE
from torchtune_longshort.training.learned_rope import initial_learned_rope, learned_rope_modules, rope_generator
from torchtune_longshort.training.step_checks import clip_gradient_norms, rope_parameters


class _Tiny(nn.Module):
    def __init__(self, rope: nn.Module):
        super().__init__()
        self.proj = nn.Linear(4, 3)
        self.rope = rope


def _clex():
    return CLEXRoPE(8, 64, original_max_seq_len=16, t_max=4)


@pytest.mark.parametrize("separately", [False, True])
def test_a_frozen_clex_has_no_trainable_rope_parameters(separately):
    m = _Tiny(_clex())
    m.rope.requires_grad_(False)
    assert [p for p in m.rope.parameters() if p.requires_grad] == [] and len(learned_rope_modules(m)) == 1
    assert rope_parameters(m) == []
    for p in m.parameters():
        p.grad = torch.ones_like(p) if p.requires_grad else None
    out = clip_gradient_norms(m, None, rope_separately=separately)
    trainable = sum(p.numel() for p in m.parameters() if p.requires_grad)
    assert set(out) == {"grad_norm"} and float(out["grad_norm"]) == pytest.approx(math.sqrt(trainable))


def test_a_plain_rope_holds_no_learned_parameters():
    m = _Tiny(DefaultRoPE(8, 64))
    assert list(m.rope.parameters()) == []  # torch's own view of the module
    assert learned_rope_modules(m) == [] and rope_parameters(m) == []
    assert initial_learned_rope(m, seed=3) == {} and rope_generator(m, 3, None) is None


def test_drawing_a_new_runs_clex_weights_leaves_the_global_stream():
    m = _Tiny(_clex())
    torch.manual_seed(11)
    before = torch.get_rng_state()
    first = initial_learned_rope(m, seed=3)
    assert torch.equal(torch.get_rng_state(), before)
    again = initial_learned_rope(m, seed=3)
    assert set(first) == {"ode_up_proj", "ode_down_proj"}
    assert all(torch.equal(first[k], again[k]) for k in first)
