"""``min_context`` at both ends of its range ``[1, L]`` (``windows.resolve_min_context``), against the windows
themselves: A is tokens ``0 .. L-1``, B tokens ``e .. L+e-1``; a position pair is compared where both predict the
same token and B's context (``k + 1`` tokens at B position ``k``) is at least the floor. Floor 1 is the module
doc's ``"none"``: the whole overlap; floor ``L`` leaves nothing to compare. Hand mutation testing found both
unasked: refusing ``min_context=1`` passed every other test of ``windows.py``."""

from __future__ import annotations

import pytest

from torchtune_longshort.windows import aligned_positions


def _pairs_from_tokens(L: int, e: int, floor: int):
    a_targets = list(range(1, L + 1))  # A position a predicts token a + 1
    b_targets = list(range(e + 1, L + e + 1))  # B position k predicts token k + e + 1
    return [(a, k) for k in range(L) if k + 1 >= floor for a in range(L) if a_targets[a] == b_targets[k]]


def _pairs(p):
    return [(p.a_start + i, p.b_start + i) for i in range(p.n)]


@pytest.mark.parametrize("L, e", [(4, 1), (8, 3), (16, 8), (16, 16)])
def test_floor_one_is_the_whole_overlap_and_floor_L_compares_nothing(L, e):
    assert _pairs(aligned_positions(L, e, 1)) == _pairs_from_tokens(L, e, 1) == _pairs(aligned_positions(L, e, None))
    assert _pairs(aligned_positions(L, e, L)) == _pairs_from_tokens(L, e, L) == []
    with pytest.raises(ValueError, match=rf"^min_context={L + 1} must be in \[1, L={L}\]"):
        aligned_positions(L, e, L + 1)
