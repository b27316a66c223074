"""Hand mutants of synthetic/tasks.py and outrep.py that survived test_synthetic_tasks (mutants14).

References: App. G's definition (the number of ones uniform on {0..l}) counted per length with scipy's chi-square,
the docstring's suffix range [1, L], and each OutRep's plot label read as the formula it names (math's sqrt / log)."""

import math

import pytest
import torch
from scipy.stats import chisquare
from synthetic_helpers import decode_bits

from torchtune_longshort.synthetic.outrep import OUTREP_LABELS, OUTREPS
from torchtune_longshort.synthetic.tasks import make_batch, suffix_batch


def test_uniform_ones_count_is_uniform_for_short_rows_of_a_mixed_batch():
    """A training batch mixes lengths (1..l_train): a row of 2 bits padded to 10 must still hold 0, 1 or 2 ones with
    probability 1/3 each (padding positions must never take a one that is then masked away)."""
    g = torch.Generator().manual_seed(0)
    n = 3000
    lengths = torch.tensor([2, 10] * n)
    rows = decode_bits(make_batch(lengths, "sum", g, "uniform_ones").tokens)
    for l in (2, 10):
        ones = [sum(r) for r in rows if len(r) == l]
        counts = [ones.count(k) for k in range(l + 1)]
        assert chisquare(counts).pvalue > 1e-4, (l, counts)


def test_a_suffix_of_zero_bits_is_refused():
    with pytest.raises(ValueError, match="suffix length 0 must be in \\[1, 3\\]"):
        suffix_batch([1, 0, 1], [0, 2], "mean")


@pytest.mark.parametrize("name", list(OUTREPS))
def test_each_outreps_label_is_the_function_it_applies(name):
    ns = {"sqrt": math.sqrt, "log": math.log}
    for v in (0.5, 2.0, 7.0):
        want = eval(OUTREP_LABELS[name], ns, {"y": v})
        got = float(OUTREPS[name].forward(torch.tensor([v], dtype=torch.float64))[0])
        assert got == pytest.approx(want, rel=1e-12)
