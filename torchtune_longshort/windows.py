"""The window geometry of long-short alignment (paper Sec. 4, Eq. 3-4): its one home.

One training sample is ``L + e`` tokens. Window A is tokens ``[0, L)``, window B tokens ``[e, L + e)``. Window A's
position ``j`` and window B's position ``j - e`` predict the same target token, from contexts of ``j + 1`` and
``j + 1 - e`` tokens. The misalignment term compares the two next-token distributions there, at the positions where
the shorter (B) context holds at least ``min_context`` tokens.

``L`` is an even int >= 4 (it is split at ``L/2``); ``e`` an int in ``[1, L]``, drawn per batch from ``e_range``.

``e_range`` is a pair ``[lo, hi]`` of ints or expressions in ``L``; the paper's Table 7 ranges are ``[1, "L/2"]``
(default, :data:`DEFAULT_E_RANGE`), ``[1, "L/4"]``, ``["L/4", "L/2"]``, ``[1, "L"]`` and ``[1, "0.05L"]``.
Non-integer bounds are floored.

``min_context`` (the floor; B's context length at a compared position is ``k + 1`` for B position ``k``):

- ``"listing"`` (default, :data:`DEFAULT_MIN_CONTEXT`) = ``L/2 + 1``: the slices of the paper's printed listing
  (A ``L/2+e .. L-1`` against B ``L/2 .. L-1-e``; B contexts ``L/2+1 .. L-e``). With this strict floor ``e = L/2``
  compares nothing; the loss is then 0 with zero gradient, where the listing's mean over an empty slice gives NaN.
- ``"inclusive"`` = ``L/2``: Eq. 4's inclusive range ``[L/2, L]`` for the shorter context (one more position).
- ``"none"`` (or ``None``, or ``1``): the whole overlap of the two windows (Table 7, setting 4: ``e ~ U[1, L]``).
- an int ``m >= 1``: any other floor in tokens.

Plain ``torch`` and the standard library only: data, loss, metric and recipe all import it.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Sequence, Tuple, Union

import torch

Bound = Union[int, float, str]
MinContext = Union[int, str, None]

DEFAULT_E_RANGE: Tuple[Bound, Bound] = (1, "L/2")
DEFAULT_MIN_CONTEXT = "listing"

# Named floors: name -> floor in tokens for window length L.
_NAMED_FLOORS: Dict[str, Callable[[int], int]] = {
    "listing": lambda L: L // 2 + 1,
    "inclusive": lambda L: L // 2,
    "none": lambda L: 1,
}

_BOUND_RE = re.compile(r"^\s*(?:(\d+(?:\.\d*)?|\.\d+)\s*\*?\s*)?L\s*(?:/\s*(\d+(?:\.\d*)?))?\s*$")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# ---------------------------------------------------------------------------------------------- L and e
def validate_window_length(L: int, field: str = "L") -> None:
    """``L`` must be an even int >= 4 (it is split at ``L/2``); else ``TypeError`` / ``ValueError`` naming ``field``."""
    if not _is_int(L):
        raise TypeError(f"{field}={L!r} is not accepted: expected an even integer >= 4 (tokens per window)")
    if L < 4 or L % 2:
        raise ValueError(f"{field}={L} must be an even number >= 4 (the misalignment floor is {field}/2)")


def validate_e(e: int, L: int) -> None:
    """``e`` (the shift between the windows) must be an int in ``[1, L]``."""
    if not _is_int(e):
        # a DataLoader's default collate turns each sample's e into a tensor of them: say that one e is per batch
        raise TypeError(f"e={e!r} must be one int for the whole batch (both windows of every sample share the shift; "
                        "samples with different e go in different batches); from a tensor or numpy value pass int(e)")
    if not 1 <= e <= L:
        raise ValueError(f"e={e} is outside [1, L={L}]")


# ---------------------------------------------------------------------------------------------- e_range
def parse_e_bound(bound: Bound, L: int, field: str = "e_range") -> int:
    """Resolve one bound of ``e_range`` to tokens: an int, or an expression in ``L`` ("L", "L/2", "0.05L", "3*L/4")."""
    if isinstance(bound, bool):
        raise ValueError(f"{field} bound {bound!r} is not a number or an expression in L")
    if isinstance(bound, int):
        value = float(bound)
    elif isinstance(bound, float):
        if not bound.is_integer():
            raise ValueError(
                f"{field} bound {bound!r}: a float bound is ambiguous; write an int or an expression like '0.05L'"
            )
        value = bound
    elif isinstance(bound, str):
        s = bound.strip()
        if re.fullmatch(r"\d+", s):
            value = float(s)
        else:
            m = _BOUND_RE.match(s)
            if not m:
                raise ValueError(
                    f"{field} bound {bound!r} is not understood; use an int or 'L', 'L/4', '0.05L', '3*L/4'"
                )
            coef = float(m.group(1)) if m.group(1) else 1.0
            div = float(m.group(2)) if m.group(2) else 1.0
            if div == 0:
                raise ValueError(f"{field} bound {bound!r} divides by 0; use an int or 'L', 'L/4', '0.05L', '3*L/4'")
            value = coef * L / div
    else:
        raise ValueError(f"{field} bound {bound!r} has type {type(bound).__name__}; expected int or str")
    return int(math.floor(value + 1e-9))


def resolve_e_range(e_range: Sequence[Bound], L: int) -> Tuple[int, int]:
    """``(lo, hi)`` in tokens; both in ``[1, L]`` and ``lo <= hi``, else ``ValueError`` naming the values."""
    validate_window_length(L)
    if isinstance(e_range, (str, bytes)) or not hasattr(e_range, "__len__") or len(e_range) != 2:
        raise ValueError(f"e_range={e_range!r} must be a pair [lo, hi] (one e for every batch: [{e_range!r}, "
                         f"{e_range!r}])")
    lo, hi = (parse_e_bound(b, L) for b in e_range)
    if not (1 <= lo <= L and 1 <= hi <= L):
        raise ValueError(f"e_range={list(e_range)} resolves to [{lo}, {hi}] for L={L}: both bounds must lie in "
                         f"[1, L={L}]")
    if lo > hi:
        raise ValueError(f"e_range={list(e_range)} resolves to [{lo}, {hi}] for L={L}: lo > hi; give the smaller "
                         "bound first")
    return lo, hi


# ---------------------------------------------------------------------------------------------- the two windows
def window_labels(tokens: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
    """Next-token labels inside a window: ``labels[:, j] = tokens[:, j + 1]``, the last position ignored."""
    labels = torch.full_like(tokens, ignore_index)
    labels[:, :-1] = tokens[:, 1:]
    return labels


def slice_windows(
    tokens: torch.Tensor, L: int, e: int, ignore_index: int = -100, bos_id: Optional[int] = None
) -> Dict[str, torch.Tensor]:
    """Cut ``[b, L + e]`` samples along the sequence into window A (``[0, L)``) and window B (``[e, L + e)``).

    Returns ``tokens`` (the samples), ``tokens_a``, ``tokens_b`` (``[b, L]``) and their :func:`window_labels`.
    ``bos_id``: write BOS over the first token of each window, so that every window starts as an evaluated
    sequence does (lm-eval puts BOS at position 0). For pre-training a base; the two windows then differ in one
    context token, so the alignment loss should not use it.
    """
    validate_window_length(L)
    validate_e(e, L)  # e = -2 gave a window B of 2 tokens, e = 0 two equal windows, e > L a gap between them
    if tokens.dim() != 2 or tokens.shape[1] != L + e:
        raise ValueError(f"tokens shape {tuple(tokens.shape)}; expected [batch, L + e = {L + e}]")
    if tokens.is_floating_point() or tokens.is_complex():
        raise ValueError(f"tokens has dtype {tokens.dtype}; expected integer token ids (tokens.long())")
    a = tokens[:, :L]
    b = tokens[:, e : e + L]
    if bos_id is not None:
        a, b = a.clone(), b.clone()
        a[:, 0] = bos_id
        b[:, 0] = bos_id
    return {
        "tokens": tokens,
        "tokens_a": a,
        "tokens_b": b,
        "labels_a": window_labels(a, ignore_index),
        "labels_b": window_labels(b, ignore_index),
    }


# ---------------------------------------------------------------------------------------------- compared positions
def validate_min_context(min_context: MinContext) -> None:
    """Refuse a ``min_context`` that no ``L`` accepts (module doc); the ``<= L`` check waits for ``L``."""
    if min_context is None or (isinstance(min_context, str) and min_context in _NAMED_FLOORS):
        return
    if _is_int(min_context) and min_context >= 1:
        return
    raise ValueError(
        f"min_context={min_context!r} is not valid; use 'listing' (L/2+1, default), 'inclusive' (L/2), "
        "'none' (whole overlap) or an int in [1, L]"
    )


def resolve_min_context(min_context: MinContext, L: int) -> int:
    """The floor in tokens for ``min_context`` (module doc) and window length ``L``."""
    validate_min_context(min_context)
    if min_context is None:
        return 1
    if isinstance(min_context, str):
        return _NAMED_FLOORS[min_context](L)
    if min_context > L:
        raise ValueError(f"min_context={min_context} must be in [1, L={L}]")
    return min_context


@dataclass(frozen=True)
class AlignedPositions:
    """Compared positions: A ``[a_start, a_start + n)`` against B ``[b_start, b_start + n)``."""

    a_start: int
    b_start: int
    n: int


def aligned_positions(L: int, e: int, min_context: MinContext = DEFAULT_MIN_CONTEXT) -> AlignedPositions:
    """Which positions of windows A and B are compared for window length ``L`` and shift ``e``.

    Returns ``AlignedPositions`` with ``n >= 0`` (``n == 0``: nothing to compare, e.g. ``e = L/2`` under the listing
    floor or ``e = L``).
    """
    validate_window_length(L)
    validate_e(e, L)
    b_start = resolve_min_context(min_context, L) - 1
    n = max(0, L - e - b_start)
    return AlignedPositions(a_start=b_start + e, b_start=b_start, n=n)


def suffix_length_range(L: int) -> Tuple[int, int]:
    """Eq. 4's range of suffix (context) lengths for the misalignment metric at length ``L``: ``[L // 2, L]``."""
    return L // 2, L


def unstack_window_outputs(out, bsz: int):
    """Unstack the batch dimension of the model output of ``cat([tokens_a, tokens_b])`` (a tensor or a list of
    chunks) into window A's and window B's outputs."""
    rows = (out[0] if isinstance(out, (list, tuple)) else out).shape[0]
    if rows != 2 * bsz:
        raise ValueError(f"the output has {rows} rows, not 2 x bsz={bsz}: pass the batch size of one window (the "
                         "model ran cat([tokens_a, tokens_b]))")
    if isinstance(out, (list, tuple)):
        return [c[:bsz] for c in out], [c[bsz:] for c in out]
    return out[:bsz], out[bsz:]
