"""Windows A and B with different numbers of targets (a masked prompt in B) and a label value of one's own for "no
target": each window's CE is the mean over its own targets, on every path, against F.cross_entropy.

Every other loss test gave both windows the same count of ignored labels, and -100: the CE weight of window A taken
from B's count, or the ignore value read as -100, changed nothing there (hand mutants; both survived).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from test_loss_fused import _divergence_ref, _StubDecoder
from torchtune_longshort.loss import LongShortLoss, restore_model_output

L, V, D, E, ALPHA = 8, 11, 6, 2, 0.4


def _inputs(ign):
    g = torch.Generator().manual_seed(5)
    ha, hb = (torch.randn(2, L, D, generator=g).requires_grad_() for _ in range(2))
    lin = nn.Linear(D, V, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(V, D, generator=g))
    la, lb = (torch.randint(0, V, (2, L), generator=g) for _ in range(2))
    la[:, -1] = lb[:, -1] = ign
    lb[1, 1:6] = ign  # B's second sample: a masked prompt (B's first row keeps its target)
    return ha, hb, lin, la, lb


def _reference(ha, hb, weight, la, lb, ign):
    za, zb = F.linear(ha, weight).double(), F.linear(hb, weight).double()
    ce_a = F.cross_entropy(za.flatten(0, 1), la.flatten(), ignore_index=ign)
    ce_b = F.cross_entropy(zb.flatten(0, 1), lb.flatten(), ignore_index=ign)
    # the listing's pairs: A's positions L/2+e .. L-1 against B's L/2 .. L-1-e
    mis = _divergence_ref("sce", za[:, L // 2 + E :], zb[:, L // 2 : L - E]).mean()
    return ce_a, ce_b, (ce_a + ce_b) / 2 + ALPHA * mis


@pytest.mark.parametrize("ign", [-100, -1])
@pytest.mark.parametrize("path", ["logits", "checkpointed", "fused"])
def test_each_window_ce_is_the_mean_over_its_own_targets(path, ign):
    ha, hb, lin, la, lb = _inputs(ign)
    assert (la != ign).sum() != (lb != ign).sum()
    ce_a, ce_b, ref = _reference(ha, hb, lin.weight, la, lb, ign)
    leaves = (ha, hb, lin.weight)
    want = torch.autograd.grad(ref, leaves)

    loss_fn = LongShortLoss(alpha=ALPHA, num_chunks=3, ignore_index=ign, fused=path == "fused")
    if path == "logits":
        out = loss_fn(lin(ha), lin(hb), la, lb, E)
    else:
        model = _StubDecoder(lin)
        loss_fn.set_model_output(model)
        assert loss_fn.output_path == path
        out = loss_fn(ha, hb, la, lb, E)
        restore_model_output(model)
    assert out.ce_a.item() == pytest.approx(ce_a.item(), rel=1e-5)
    assert out.ce_b.item() == pytest.approx(ce_b.item(), rel=1e-5)
    assert out.loss.item() == pytest.approx(ref.item(), rel=1e-5)
    for name, got, w in zip(("ha", "hb", "weight"), torch.autograd.grad(out.loss, leaves), want):
        torch.testing.assert_close(got, w.float(), rtol=1e-4, atol=1e-6, msg=name)
