"""The smallest window length: ``L = 4`` (the README's config table: ``seq_len`` even, >= 4). It is the smallest even
``L`` whose windows share a compared target: the paper's slices compare A's positions ``L/2+e .. L-1`` with B's
``L/2 .. L-1-e``, which for ``e = 1`` is one pair at ``L = 4`` (A's 3, B's 2) and none at ``L = 2``. Hand mutation
testing found it unasked: refusing ``L = 4`` passed every other test of ``windows.py``."""

from __future__ import annotations

import pytest

from torchtune_longshort.windows import aligned_positions, validate_window_length


def _paper_pairs(L: int, e: int):
    return list(zip(range(L // 2 + e, L), range(L // 2, L - e)))


def test_the_smallest_window_with_a_compared_target_is_accepted():
    L = next(L for L in range(2, 100, 2) if _paper_pairs(L, 1))
    validate_window_length(L)
    p = aligned_positions(L, 1)
    assert [(p.a_start + i, p.b_start + i) for i in range(p.n)] == _paper_pairs(L, 1)
    assert not _paper_pairs(L - 2, 1)
    with pytest.raises(ValueError, match=rf"^L={L - 2} must be an even number >= {L}"):
        validate_window_length(L - 2)
