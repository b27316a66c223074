"""mean_divergence's mask: the mean over the positions it keeps, and 0 (never NaN) where it keeps none, as its
docstring and README's API table say; the reference: each kept position's SCE summed by hand."""

import math

import torch

from torchtune_longshort.loss import mean_divergence


def _sce(a, b):  # Eq. 3 by hand, float64, one position
    p, q = torch.softmax(a.double(), -1), torch.softmax(b.double(), -1)
    return -sum(float(q[i] * p[i].log() + p[i] * q[i].log()) for i in range(p.shape[0]))


def test_a_mask_that_keeps_no_position_gives_zero_and_a_zero_gradient_not_nan():
    a = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(0), requires_grad=True)
    b = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(1))
    none = mean_divergence(a, b, torch.zeros(2, 3, dtype=torch.bool))
    assert none.item() == 0.0
    none.backward()
    assert torch.equal(a.grad, torch.zeros_like(a))
    some = torch.tensor([[True, False, False], [False, False, True]])
    want = (_sce(a[0, 0], b[0, 0]) + _sce(a[1, 2], b[1, 2])) / 2
    assert math.isclose(mean_divergence(a, b, some).item(), want, rel_tol=1e-5)
