"""The S2-Attn group of a ratio is LongLoRA's ``group_size = int(q_len * group_size_ratio)`` (llama_attn_replace.py):
the floor of the product, never rounded up (a rounded group of int(11 x 0.5) + 1 = 6 tokens would not be the one a
LongLoRA run used), and never below 2 (the smallest group with a half-group shift). Reference: ``math.floor``."""

from __future__ import annotations

import math

import pytest

from torchtune_longshort.models.s2_attn import s2_group_size


@pytest.mark.parametrize("seq_len, ratio", [(11, 0.5), (30, 0.25), (100, 0.37), (4096, 0.25), (13, 0.9)])
def test_a_ratio_gives_the_floor_of_length_times_ratio(seq_len, ratio):
    assert s2_group_size(seq_len, None, ratio) == math.floor(seq_len * ratio)


def test_a_fixed_group_size_wins_over_the_ratio_and_a_tiny_product_is_two():
    assert s2_group_size(64, 8, 0.5) == 8
    assert s2_group_size(4, None, 0.25) == 2  # floor(1.0) = 1: no half group to shift by
