"""Synthetic task generators (paper Sec. 3, App. G): targets recomputed from the decoded sequences, distributions
checked against their closed forms, OutRep round trips and domain errors."""

import math

import pytest
import torch
from synthetic_helpers import decode_bits

from torchtune_longshort.synthetic.outrep import OUTREPS, get_outrep
from torchtune_longshort.synthetic.tasks import (
    BOS,
    EOS,
    PAD,
    eval_lengths,
    make_batch,
    suffix_batch,
    train_lengths,
)


def _recompute(bits, task):
    # independent of make_batch: plain Python on the decoded tokens
    if task == "mean":
        return sum(bits) / len(bits)
    if task == "length":
        return float(len(bits))
    return float(sum(bits))


@pytest.mark.parametrize("bits", ["iid", "uniform_ones"])
@pytest.mark.parametrize("task", ["mean", "length", "sum"])
def test_targets_recomputed_from_tokens(task, bits):
    g = torch.Generator().manual_seed(1)
    lengths = torch.tensor([1, 2, 3, 7, 10, 10, 25, 50])
    b = make_batch(lengths, task, g, bits)
    decoded = decode_bits(b.tokens)  # raises if the layout is not <BOS> bits <EOS> PAD*
    assert [len(r) for r in decoded] == lengths.tolist()
    assert (b.tokens[torch.arange(len(lengths)), b.eos_pos] == EOS).all()
    assert (b.tokens[:, 0] == BOS).all()
    for r, t in zip(decoded, b.target.tolist()):
        assert t == pytest.approx(_recompute(r, task), abs=0)


def test_iid_bits_are_fair_and_independent_of_position():
    g = torch.Generator().manual_seed(0)
    b = make_batch(torch.full((4000,), 20), "sum", g, "iid")
    bits = torch.tensor(decode_bits(b.tokens), dtype=torch.float64)
    # each position: mean 1/2 with sd sqrt(1/4/4000) ~ 0.0079; 5 sd band
    assert (bits.mean(0) - 0.5).abs().max() < 0.04
    # sum of 20 fair bits: variance 20/4 = 5
    assert float(b.target.var()) == pytest.approx(5.0, rel=0.08)


def test_uniform_ones_count_is_uniform_on_0_to_l():
    g = torch.Generator().manual_seed(0)
    l, n = 6, 14000
    b = make_batch(torch.full((n,), l), "sum", g, "uniform_ones")
    counts = torch.bincount(b.target.long(), minlength=l + 1).double() / n
    # 7 cells of probability 1/7, sd ~ 0.003
    assert (counts - 1.0 / (l + 1)).abs().max() < 0.015
    # the ones are spread over positions uniformly: every position is 1 with probability E[n1]/l = 1/2
    bits = torch.tensor(decode_bits(b.tokens), dtype=torch.float64)
    assert (bits.mean(0) - 0.5).abs().max() < 0.03


def test_lengths_ranges():
    g = torch.Generator().manual_seed(0)
    tl = train_lengths(5000, 10, g)
    assert tl.min() == 1 and tl.max() == 10
    assert torch.bincount(tl, minlength=11)[1:].min() > 400  # ~500 each
    el = eval_lengths(50, 3)
    assert el.tolist() == [l for l in range(1, 51) for _ in range(3)]


def test_suffix_batch_matches_slicing():
    row = [1, 0, 0, 1, 1, 0, 1, 1]
    b = suffix_batch(row, [4, 5, 8], "sum")
    dec = decode_bits(b.tokens)
    assert dec == [row[-4:], row[-5:], row]
    assert b.target.tolist() == [sum(row[-4:]), sum(row[-5:]), sum(row)]
    with pytest.raises(ValueError, match="suffix length 9"):
        suffix_batch(row, [9], "sum")


def test_bad_task_and_bits_and_lengths_fail_clearly():
    g = torch.Generator().manual_seed(0)
    with pytest.raises(ValueError, match="task='median'.*accepted: mean, length, sum"):
        make_batch(torch.tensor([3]), "median", g)
    with pytest.raises(ValueError, match="bits='gauss'"):
        make_batch(torch.tensor([3]), "sum", g, "gauss")
    with pytest.raises(ValueError, match="lengths must be >= 1"):
        make_batch(torch.tensor([0, 3]), "sum", g)
    with pytest.raises(ValueError, match="not '<BOS> bits <EOS> PAD\\*'"):
        decode_bits(torch.tensor([[BOS, 0, PAD, EOS]]))


@pytest.mark.parametrize("name", list(OUTREPS))
def test_outrep_round_trip_and_closed_form(name):
    y = torch.arange(1, 51, dtype=torch.float64)
    f = get_outrep(name)
    z = f.forward(y)
    expected = {
        "identity": y,
        "sqrt": y**0.5,
        "log": torch.tensor([math.log(v) for v in y.tolist()], dtype=torch.float64),
        "inv_sqrt": y**-0.5,
        "inv": 1 / y,
        "inv_log1p": torch.tensor([1 / math.log(v + 1) for v in y.tolist()], dtype=torch.float64),
    }[name]
    torch.testing.assert_close(z, expected)
    torch.testing.assert_close(f.inverse(z), y)


@pytest.mark.parametrize("name", ["log", "inv_sqrt", "inv", "inv_log1p"])
def test_outrep_rejects_zero_target(name):
    with pytest.raises(ValueError, match=f"outrep='{name}' needs targets in y > 0, but a target is 0"):
        get_outrep(name).forward(torch.tensor([3.0, 0.0]))


def test_unknown_outrep_fails():
    with pytest.raises(ValueError, match="outrep='cube' is unknown; accepted: identity, sqrt"):
        get_outrep("cube")
