"""The stdlib's own shuffle (``corpus.stdlib(shuffle_seed=s)``, :class:`~.shuffled.Shuffled`) takes its seed: the
order is Python's ``random.Random(s).shuffle`` of the source's order (the reference), so that another seed gives
another order and a run resumed by a later version reads the same documents at its saved position."""

from __future__ import annotations

import random

from torchtune_longshort.data.shuffled import Shuffled


def _source():
    docs = [f"document {i}\n" for i in range(40)]
    return lambda: iter(docs)


def test_the_order_is_random_random_of_the_seed():
    orders = []
    for seed in (0, 1, 12345):
        expected = list(_source()())
        random.Random(seed).shuffle(expected)
        got = list(Shuffled(_source(), seed)())
        assert got == expected and got == list(Shuffled(_source(), seed)())
        orders.append(got)
    assert len({tuple(o) for o in orders}) == 3  # each seed its own order


def test_pieces_are_cut_at_line_ends_then_shuffled_with_the_seed():
    lines = [f"line {i}\n" for i in range(10)]  # 7 characters each: pieces of 14 characters hold 2 lines
    text = "".join(lines)
    expected = ["".join(lines[i:i + 2]) for i in range(0, 10, 2)]
    random.Random(5).shuffle(expected)
    assert list(Shuffled(lambda: iter([text]), 5, piece_chars=14)()) == expected
