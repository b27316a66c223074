"""mean_divergence's mask keeping one position: the mean is that position's SCE (Eq. 3 by hand), not a fraction of
it. The mask tests kept none or two positions, where a count floored at 2 instead of 1 gave the same means (a hand
mutant)."""

import math

import torch

from test_divergence_masked_mean import _sce
from torchtune_longshort.loss import mean_divergence


def test_a_mask_that_keeps_one_position_gives_its_divergence():
    a = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(2))
    b = torch.randn(2, 3, 7, generator=torch.Generator().manual_seed(3))
    one = torch.zeros(2, 3, dtype=torch.bool)
    one[1, 1] = True
    assert math.isclose(mean_divergence(a, b, one).item(), _sce(a[1, 1], b[1, 1]), rel_tol=1e-5)
