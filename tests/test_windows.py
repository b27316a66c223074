"""The window geometry's own rules: min_context floors, early refusal of a bad floor, the default e range, Eq. 4's
suffix range, and iterating a batcher (the stream's end ends the iteration)."""

import re

import pytest
import torch

from torchtune_longshort.data import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.windows import (
    DEFAULT_E_RANGE,
    resolve_e_range,
    resolve_min_context,
    slice_windows,
    suffix_length_range,
    validate_min_context,
)


@pytest.mark.parametrize("L", [4, 16, 4096])
def test_named_floors_are_the_papers(L):
    assert resolve_min_context("listing", L) == L // 2 + 1  # the printed listing's slices
    assert resolve_min_context("inclusive", L) == L // 2  # Eq. 4's [L/2, L]
    assert resolve_min_context("none", L) == resolve_min_context(None, L) == 1
    assert resolve_min_context(3, L) == 3


@pytest.mark.parametrize("bad", [0, -2, True, "half", 2.0])
def test_a_floor_no_L_accepts_is_refused_when_the_loss_is_built(bad):
    with pytest.raises(ValueError, match="min_context"):
        validate_min_context(bad)
    with pytest.raises(ValueError, match="min_context"):
        LongShortLoss(min_context=bad)


def test_a_floor_above_L_is_refused_once_L_is_known():
    validate_min_context(17)
    with pytest.raises(ValueError, match=r"min_context=17 must be in \[1, L=16\]"):
        resolve_min_context(17, 16)


def test_default_e_range_is_one_to_half_L():
    assert resolve_e_range(DEFAULT_E_RANGE, 64) == (1, 32)


def test_eq4_suffix_range():
    assert suffix_length_range(256) == (128, 256)
    assert suffix_length_range(7) == (3, 7)


def test_iterating_a_batcher_yields_next_batch_until_the_stream_ends():
    docs = [list(range(3, 3 + 9))] * 4  # 36 tokens per epoch
    make = lambda: DualWindowBatcher(PackedTokenStream(lambda: iter(docs), max_epochs=1), L=8, e_range=(2, 2))  # noqa: E731
    batches = list(make())
    assert len(batches) == 36 // 10  # every sample is L + e = 10 tokens; the stream's last 6 make no sample
    ref = make()
    for got in batches:
        assert torch.equal(got["tokens"], ref.next_batch()["tokens"])


def test_slice_windows_cuts_the_definition_and_refuses_an_e_or_L_the_geometry_does_not_take():
    """A = x[0:L], B = x[e:L+e], labels the next token inside each window. e = -2 gave a window B of 2 tokens, e = 0
    two equal windows, e > L a gap, an odd L and float tokens passed."""
    L, e = 8, 3
    x = torch.arange(2 * (L + e)).view(2, L + e)
    w = slice_windows(x, L, e)
    assert torch.equal(w["tokens_a"], x[:, :L]) and torch.equal(w["tokens_b"], x[:, e : L + e])
    assert torch.equal(w["labels_a"][:, :-1], x[:, 1:L]) and torch.equal(w["labels_b"][:, :-1], x[:, e + 1 : L + e])
    assert (w["labels_a"][:, -1] == -100).all() and (w["labels_b"][:, -1] == -100).all()
    y = torch.arange(2 * L)[None]
    assert slice_windows(y, L, L)["tokens_b"].equal(y[:, L:])  # e = L: disjoint windows
    for bad_e, n in ((-2, L - 2), (0, L), (L + 2, 2 * L + 2)):
        with pytest.raises(ValueError, match=rf"^e={bad_e} is outside \[1, L={L}\]"):
            slice_windows(torch.zeros(2, n, dtype=torch.long), L, bad_e)
    with pytest.raises(ValueError, match=r"^L=7 must be an even number"):
        slice_windows(torch.zeros(2, 10, dtype=torch.long), 7, 3)
    with pytest.raises(ValueError, match=r"^tokens has dtype torch.float32; expected integer token ids"):
        slice_windows(x.float(), L, e)


def test_an_e_range_whose_bounds_are_swapped_says_which_comes_first():
    """Before: "e_range=['L/2', 1] resolves to [4, 1] for L=8: lo > hi", no fix; matched whole, on one line."""
    with pytest.raises(ValueError) as info:
        resolve_e_range(["L/2", 1], 8)
    assert re.fullmatch(r"e_range=\['L/2', 1\] resolves to \[4, 1\] for L=8: lo > hi; give the smaller bound first",
                        str(info.value)), str(info.value)
