"""Which distribution a divergence gets first: window A's (the longer context) as ``logits_p``, window B's (the
shorter) as ``logits_q``; in the metric, the ``l1`` suffix's first. The shipped three are symmetric, and the test of a
divergence of one's own trains a copy of Jeffreys (symmetric too): every path could hand a one-sided divergence its
two windows the other way round (``KL(p_B || p_A)`` trained for ``KL(p_A || p_B)``) and no test said so. Here a
one-sided KL of one's own on every path of the loss and in the metric, against that KL written from its definition
on the full logits of the two windows (no code shared with the library)."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.loss import LongShortLoss, misalignment_loss
from torchtune_longshort.metrics import suffix_misalignment

KL_SOURCE = '''
import torch.nn.functional as F


def kl_pq(logits_p, logits_q):
    """KL(p || q) per position, float32: one-sided."""
    lp, lq = F.log_softmax(logits_p.float(), -1), F.log_softmax(logits_q.float(), -1)
    return (lp.exp() * (lp - lq)).sum(-1)
'''

V, D, L, E, ALPHA = 29, 8, 16, 3, 0.7


@pytest.fixture
def kl_pq(tmp_path, monkeypatch):
    write_user_module(tmp_path, {"my_kl.py": KL_SOURCE}, monkeypatch)
    yield "my_kl.kl_pq"
    forget_user_module("my_kl")


def _kl(za, zb):
    """KL(softmax(za) || softmax(zb)) per position, float64, from the definition."""
    p, q = torch.softmax(za.double(), -1), torch.softmax(zb.double(), -1)
    return (p * (p.log() - q.log())).sum(-1)


def _inputs():
    g = torch.Generator().manual_seed(0)
    ha = torch.randn(2, L, D, generator=g, requires_grad=True)
    hb = torch.randn(2, L, D, generator=g, requires_grad=True)
    out = torch.nn.Linear(D, V, bias=False)
    with torch.no_grad():
        out.weight.copy_(torch.randn(V, D, generator=g))
    labels = torch.randint(0, V, (2, L), generator=g)
    return ha, hb, out, labels


def _reference(ha, hb, out, labels):
    """ce + alpha * mean KL(p_A || p_B) over the listing's pairs (A ``L/2+e .. L-1``, B ``L/2 .. L-1-e``)."""
    za, zb = out(ha).double(), out(hb).double()
    ce = (F.cross_entropy(za.flatten(0, 1), labels.flatten()) + F.cross_entropy(zb.flatten(0, 1), labels.flatten())) / 2
    mis = _kl(za[:, L // 2 + E :], zb[:, L // 2 : L - E]).mean()
    return ce + ALPHA * mis, mis


@pytest.mark.parametrize("path", ["fused", "checkpointed", "logits"])
def test_a_one_sided_divergence_is_given_window_a_first_on_every_path(kl_pq, path):
    ha, hb, out, labels = _inputs()
    want_loss, want_mis = _reference(ha, hb, out, labels)
    # the reverse KL differs by far more than the tolerance: the check can tell the two orders apart
    reverse = _kl(out(hb)[:, L // 2 : L - E], out(ha)[:, L // 2 + E :]).mean()
    assert abs(reverse.item() - want_mis.item()) > 0.05 * want_mis.item()
    want_grads = torch.autograd.grad(want_loss, (ha, hb, out.weight))

    loss_fn = LongShortLoss(alpha=ALPHA, divergence=kl_pq, num_chunks=3, fused=path == "fused")
    if path == "logits":
        got = loss_fn(out(ha), out(hb), labels, labels, E)
    else:
        loss_fn.linear_projection = out  # the hidden-state path, as set_model_output sets it
        assert loss_fn.output_path == path
        got = loss_fn(ha, hb, labels, labels, E)
    assert got.misalignment.item() == pytest.approx(want_mis.item(), rel=1e-5)
    grads = torch.autograd.grad(got.loss, (ha, hb, out.weight))
    for name, g, w in zip(("ha", "hb", "weight"), grads, want_grads):
        torch.testing.assert_close(g, w.float(), rtol=1e-4, atol=1e-6, msg=name)


def test_the_readable_term_and_the_metric_give_the_longer_context_first(kl_pq):
    ha, hb, out, _ = _inputs()
    with torch.no_grad():
        za, zb = out(ha), out(hb)
        got = misalignment_loss(za, zb, E, divergence=kl_pq).item()
        assert got == pytest.approx(_kl(za[:, L // 2 + E :], zb[:, L // 2 : L - E]).mean().item(), rel=1e-5)

    table = torch.randn(9, V, generator=torch.Generator().manual_seed(1))
    table[8] *= 3  # a sharp distribution after 8 tokens, a flat one after 5: KL one way is far from the other
    table[5] *= 0.3

    def by_length(tokens):  # next-token logits that depend on the context's length alone
        return table[tokens.shape[1]].expand(tokens.shape[0], tokens.shape[1], V)

    got = suffix_misalignment(by_length, torch.arange(8), 8, 5, divergences=[kl_pq])[kl_pq]
    assert got == pytest.approx(_kl(table[8], table[5]).item(), rel=1e-5)
    assert abs(_kl(table[5], table[8]).item() - got) > 0.05 * got
