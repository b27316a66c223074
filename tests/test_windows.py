"""The window geometry's own rules: min_context floors, early refusal of a bad floor, the default e range, Eq. 4's
suffix range, and iterating a batcher (the stream's end ends the iteration)."""

import pytest
import torch

from torchtune_longshort.data import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.loss import LongShortLoss
from torchtune_longshort.windows import (
    DEFAULT_E_RANGE,
    resolve_e_range,
    resolve_min_context,
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
