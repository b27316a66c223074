"""The fused path at a vocabulary of whole dot blocks plus a remainder (``pair_gradients.DOT_BLOCK`` + 5 entries;
Llama-2's 32000 is 7 blocks + 3328): every divergence and its gradients against the float64 definitions.

The fused tests ran a 97-entry vocabulary (no whole block) and 49152 (whole blocks, no remainder): a ``<x, y>``
that kept only the remainder's sum where both exist passed them (a hand mutant; Jeffreys sums without a buffer).
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from test_loss_fused import _divergence_ref, _StubDecoder
from torchtune_longshort.loss import LongShortLoss

L, D, E, ALPHA = 8, 4, 1, 0.5
VOCAB = 4096 + 5


@pytest.mark.parametrize("divergence", ["sce", "jeffreys", "js"])
def test_fused_divergence_at_whole_blocks_plus_a_remainder(divergence):
    g = torch.Generator().manual_seed(3)
    ha, hb = (torch.randn(1, L, D, generator=g).requires_grad_() for _ in range(2))
    lin = nn.Linear(D, VOCAB, bias=False)
    with torch.no_grad():
        lin.weight.copy_(torch.randn(VOCAB, D, generator=g))
    la, lb = (torch.randint(0, VOCAB, (1, L), generator=g) for _ in range(2))
    za, zb = F.linear(ha, lin.weight).double(), F.linear(hb, lin.weight).double()
    mis = _divergence_ref(divergence, za[:, L // 2 + E :], zb[:, L // 2 : L - E]).mean()  # the listing's pairs
    ref = (F.cross_entropy(za[0], la[0]) + F.cross_entropy(zb[0], lb[0])) / 2 + ALPHA * mis
    loss_fn = LongShortLoss(alpha=ALPHA, divergence=divergence, num_chunks=2)
    loss_fn.set_model_output(_StubDecoder(lin))
    out = loss_fn(ha, hb, la, lb, E)
    assert out.misalignment.item() == pytest.approx(mis.item(), rel=1e-5)
    leaves = (ha, hb, lin.weight)
    for name, got, want in zip(("ha", "hb", "weight"), torch.autograd.grad(out.loss, leaves),
                               torch.autograd.grad(ref, leaves)):
        torch.testing.assert_close(got, want.float(), rtol=1e-4, atol=1e-6, msg=name)
