"""The synthetic misalignment metric takes its suffix lengths from the window geometry's one owner
(``windows.suffix_length_range``: Eq. 4's ``[L // 2, L]``), also at odd ``L``, where ``ceil(L/2)`` would drop one.

References: the closed-form variance of a discrete uniform length, and a hand loop that runs a real
``SyntheticTransformer`` on every suffix of every sequence."""

import numpy as np
import pytest
import torch

from torchtune_longshort.synthetic.misalignment import scalar_misalignment
from torchtune_longshort.synthetic.models import SyntheticTransformer
from torchtune_longshort.synthetic.tasks import sample_bits, suffix_batch


def _uniform_var(lo: int, hi: int) -> float:
    """Population variance of the integers lo..hi, each equally likely: ((hi - lo + 1)^2 - 1) / 12."""
    n = hi - lo + 1
    return (n * n - 1) / 12


@pytest.mark.parametrize("L, lo", [(7, 3), (9, 4), (8, 4)])
def test_length_task_spread_is_the_variance_of_l_over_l_half_floor_to_l(L, lo):
    """The length task's target is the suffix length itself, so its spread is the variance of U{L//2..L}: at L=7,
    5 lengths 3..7 give 2.0 (ceil(L/2)'s 4..7 gives 1.25)."""
    model = SyntheticTransformer(pe="rope", dim=16, num_layers=1, num_heads=2, max_len=L + 2).double()
    out = scalar_misalignment(model, "length", L, n_seq=2)
    assert out["target_y"] == pytest.approx(_uniform_var(lo, L), rel=1e-12)


def test_model_spread_at_odd_L_equals_a_hand_loop_over_every_suffix():
    L, n_seq, seed = 7, 3, 5
    torch.manual_seed(0)
    model = SyntheticTransformer(pe="rope", dim=16, num_layers=1, num_heads=2, max_len=L + 2).double().eval()
    out = scalar_misalignment(model, "sum", L, n_seq=n_seq, seed=seed)
    rows = sample_bits(torch.full((n_seq,), L), "iid", torch.Generator().manual_seed(seed)).tolist()
    spreads = []
    with torch.no_grad():
        for row in rows:
            preds = []
            for m in range(L // 2, L + 1):  # Eq. 4: suffixes of L//2 .. L bits, one at a time
                b = suffix_batch(row, [m], "sum")
                preds.append(float(model(b.tokens, b.eos_pos).double()[0]))
            spreads.append(np.var(preds))
    assert out["model_f"] == pytest.approx(float(np.mean(spreads)), rel=1e-5)
