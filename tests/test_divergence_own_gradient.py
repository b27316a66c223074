"""A divergence of one's own that a run trains on (alpha > 0) needs a gradient from autograd: the fused path asks it
of each block's log-probabilities (leaves that require grad), the checkpointed one backpropagates through it. One
computed under torch.no_grad, in NumPy or changing its inputs in place passed the import probe (no gradient asked),
passed longshort-validate, wrote step_0 and failed tune run's first step in a traceback (exit 1); on the checkpointed
path a no_grad one trained on the CE alone without a word. It is now refused in one line before anything runs (the
loss and the config check alike); at alpha=0 (reported, never differentiated) it is taken as before."""

from __future__ import annotations

import warnings

import pytest
import torch

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.config.fields import build_section
from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.loss.divergences import divergence_fn
from torchtune_longshort.training.recipe_config.loss import LossConfig

SOURCE = '''
import numpy as np
import torch
import torch.nn.functional as F


def kl_pq(logits_p, logits_q):
    lp, lq = F.log_softmax(logits_p.float(), -1), F.log_softmax(logits_q.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)


@torch.no_grad()
def kl_nograd(logits_p, logits_q):
    return kl_pq(logits_p, logits_q)


def kl_numpy(logits_p, logits_q):
    a, b = logits_p.float().numpy(), logits_q.float().numpy()
    la = a - np.log(np.exp(a).sum(-1, keepdims=True))
    lb = b - np.log(np.exp(b).sum(-1, keepdims=True))
    return torch.from_numpy((np.exp(la) * (la - lb)).sum(-1)).float()


def kl_numpy_leaf(logits_p, logits_q):  # what "its values carry no gradient" may lead one to write
    return torch.tensor(kl_numpy(logits_p.detach(), logits_q.detach()).numpy(), requires_grad=True)


def kl_inplace(logits_p, logits_q):
    lp, lq = logits_p.float(), logits_q.float()
    lp.sub_(lp.logsumexp(-1, keepdim=True))
    lq.sub_(lq.logsumexp(-1, keepdim=True))
    return (lp.exp() * (lp - lq)).sum(-1)
'''
UNTRAINABLE = ("kl_nograd", "kl_numpy", "kl_inplace")


@pytest.fixture
def grad_divs(tmp_path, monkeypatch):
    write_user_module(tmp_path, {"grad_divs.py": SOURCE}, monkeypatch)
    yield "grad_divs"
    forget_user_module("grad_divs")


def _autograd_fails(fn) -> bool:
    """The reference: torch.autograd itself on logits that require grad, as the fused path asks it."""
    za = torch.randn(2, 4, 7).requires_grad_()
    zb = torch.randn(2, 4, 7).requires_grad_()
    try:
        torch.autograd.grad(fn(za, zb).sum(), (za, zb), allow_unused=True)
    except RuntimeError:
        return True
    return False


def _why_not(fn) -> str:
    """The reference for the reason: what torch itself does with the function on leaves that require grad."""
    za, zb = torch.randn(2, 4, 7).requires_grad_(), torch.randn(2, 4, 7).requires_grad_()
    try:
        out = fn(za, zb)
    except Exception as e:  # noqa: BLE001 - NumPy's refusal of a tensor that requires grad
        return f"raised {type(e).__name__}: "
    return "its values carry no gradient" if not out.requires_grad else "asking autograd for its gradient raised"


@pytest.mark.parametrize("name", UNTRAINABLE)
def test_a_divergence_autograd_cannot_differentiate_is_refused_where_it_would_be_trained(grad_divs, name):
    path = f"{grad_divs}.{name}"
    assert _autograd_fails(divergence_fn(path))  # the import probe takes it: a metric may be computed anyhow
    with pytest.raises(ValueError) as info:
        LongShortLoss(alpha=0.1, divergence=path)
    msg = str(info.value)
    assert msg.startswith(f"divergence='{path}' cannot be trained on (alpha=0.1): on two [2, 3, 5] float32 logit "
                          "tensors that require grad") and "\n" not in msg
    assert msg.endswith("or in-place change of its inputs), or set alpha=0 to report it alone")
    assert _why_not(divergence_fn(path)) in msg  # a no_grad one: why in words, not autograd's 'element 0 of ...'
    with pytest.raises(ValueError) as info:
        build_section(LossConfig, {"_component_": "torchtune_longshort.loss.LongShortLoss", "divergence": path}, "loss")
    assert str(info.value).startswith(f"loss.divergence='{path}' cannot be trained on (loss.alpha=0.1): ")
    assert str(info.value).endswith("or set loss.alpha=0 to report it alone")
    # alpha 0: reported, never differentiated (the misalignment is computed without a graph), so taken
    LongShortLoss(alpha=0.0, divergence=path)
    build_section(LossConfig, {"_component_": "torchtune_longshort.loss.LongShortLoss", "divergence": path,
                               "alpha": 0}, "loss")


def test_a_differentiable_divergence_of_ones_own_and_the_shipped_ones_are_taken(grad_divs):
    path = f"{grad_divs}.kl_pq"
    assert not _autograd_fails(divergence_fn(path))
    for name in (path, "sce", "jeffreys", "js", "torchtune_longshort.loss.divergences.js_per_position"):
        LongShortLoss(alpha=0.1, divergence=name)
        build_section(LossConfig, {"_component_": "torchtune_longshort.loss.LongShortLoss", "divergence": name},
                      "loss")


def test_the_no_grad_one_at_alpha_0_reports_its_value(grad_divs):
    torch.manual_seed(0)
    out = torch.nn.Linear(8, 11)
    ha, hb = torch.randn(1, 8, 8), torch.randn(1, 8, 8)
    labels = torch.randint(0, 11, (1, 8))
    got = []
    for name in ("kl_nograd", "kl_pq"):  # the same value, the second's graph never asked for
        fn = LongShortLoss(alpha=0.0, divergence=f"{grad_divs}.{name}", num_chunks=2)
        fn.linear_projection = out
        got.append(float(fn(ha, hb, labels, labels, 3).misalignment))
    assert got[0] == pytest.approx(got[1], rel=1e-6) and got[0] > 0


def test_a_divergence_whose_values_reach_neither_logit_tensor_is_refused(grad_divs):
    """Made anew from NumPy's result with requires_grad=True: tune run trained on it at alpha 0.1 with the same
    gradient norms and CE as alpha 0 (the CE alone), longshort-validate saying OK."""
    path = f"{grad_divs}.kl_numpy_leaf"
    za, zb = torch.randn(2, 4, 7).requires_grad_(), torch.randn(2, 4, 7).requires_grad_()
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")  # the import probe printed torch's 'Converting a tensor with requires_grad'
        fn = divergence_fn(path)
    assert [str(w.message) for w in said] == []
    out = fn(za, zb)  # the reference: torch gives no gradient to either input
    assert out.requires_grad and torch.autograd.grad(out.sum(), (za, zb), allow_unused=True) == (None, None)
    with pytest.raises(ValueError) as info:
        LongShortLoss(alpha=0.1, divergence=path)
    assert str(info.value) == (
        f"divergence='{path}' cannot be trained on (alpha=0.1): on two [2, 3, 5] float32 logit tensors that require "
        "grad its values require grad but do not come from them (a tensor made anew, e.g. torch.tensor(..., "
        "requires_grad=True) of a NumPy result): autograd gives neither a gradient: compute it with torch operations "
        "autograd follows (no torch.no_grad, .detach(), .item(), NumPy, or in-place change of its inputs), or set "
        "alpha=0 to report it alone")
    with pytest.raises(ValueError, match=r"^loss\.divergence='grad_divs\.kl_numpy_leaf' cannot be trained on"):
        build_section(LossConfig, {"_component_": "torchtune_longshort.loss.LongShortLoss", "divergence": path}, "loss")
    LongShortLoss(alpha=0.0, divergence=path)  # reported alone: taken
