"""Chunks of the *shared target index* of one ``L + e`` dual-window sample, as the long-short loss walks it.

Index ``g`` in ``[0, L + e)`` is a target position of the sample: window A's position ``g`` (when ``g < L``) and window
B's position ``g - e`` (when ``g >= e``). Cutting ``g`` into contiguous chunks computes every logit row exactly once
(each row of A and of B lies in one chunk) and keeps each aligned pair (A ``j``, B ``j - e``) inside one chunk, so the
divergence of a pair never needs rows from two chunks.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import List

from torchtune_longshort.windows import AlignedPositions


@dataclass(frozen=True)
class TargetChunk:
    """One chunk ``[g0, g1)``: rows ``[a_lo, a_hi)`` of window A, ``[b_lo, b_hi)`` of window B, and ``n_pairs``
    aligned pairs starting at row ``pair_a`` of the chunk's A rows and row ``pair_b`` of its B rows."""

    a_lo: int
    a_hi: int
    b_lo: int
    b_hi: int
    pair_a: int
    pair_b: int
    n_pairs: int

    @property
    def n_a(self) -> int:
        return max(0, self.a_hi - self.a_lo)

    @property
    def n_b(self) -> int:
        return max(0, self.b_hi - self.b_lo)


def target_chunks(L: int, e: int, pos: AlignedPositions, num_chunks: int) -> List[TargetChunk]:
    """Cut the ``L + e`` shared target positions into at most ``num_chunks`` contiguous chunks (see module doc)."""
    total = L + e
    csize = max(1, math.ceil(total / num_chunks))
    out = []
    for g0 in range(0, total, csize):
        g1 = min(total, g0 + csize)
        a_lo, a_hi = max(g0, 0), min(g1, L)
        b_lo, b_hi = max(g0, e) - e, min(g1, L + e) - e
        p_lo, p_hi = max(g0, pos.a_start), min(g1, pos.a_start + pos.n)
        n_pairs = max(0, p_hi - p_lo)
        out.append(TargetChunk(a_lo, a_hi, b_lo, b_hi, p_lo - a_lo, p_lo - e - b_lo, n_pairs))
    return out
