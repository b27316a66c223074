"""How the study's figures and tables name what they show: the seed count of a point, an ``e`` range, a loss row,
and which of a panel's cells are empty and why."""

from __future__ import annotations

from typing import Dict, List, Sequence, Tuple


def seeds_text(n: int, spread: bool = True) -> str:
    """What a figure's points are, for its title: ``"mean ± sd over 3 seeds"`` (``spread=False``: ``"mean over 3
    seeds"``), or ``"1 seed"`` when there is one (a single value has no sd)."""
    if n <= 1:
        return "1 seed"
    return f"mean ± sd over {n} seeds" if spread else f"mean over {n} seeds"


def e_range_text(bounds) -> str:
    """An ``e_range`` as a reader writes it: ``[1, "L/4"]`` -> ``U[1, L/4]`` (no Python quotes)."""
    return "U[" + ", ".join(str(b) for b in bounds) + "]"


def loss_label(alpha: float) -> str:
    return "CE (alpha = 0)" if alpha == 0 else f"CE + {alpha:g} x misalignment"


def seeds_of_cells(counts: Sequence[int]) -> str:
    """What a figure's points are, from how many seeds each one averages (``counts``, one per drawn point): ``"1
    seed"`` when none has more, ``"mean ± sd over 3 seeds"``, or ``"mean ± sd over 1-3 seeds"`` when they differ
    (a config's seed list says what was planned, not what a point holds); ``"nothing drawn"`` without points."""
    ns = sorted({int(n) for n in counts if n})
    if not ns:
        return "nothing drawn"
    if ns[-1] <= 1:
        return "1 seed"
    return seeds_text(ns[0]) if len(ns) == 1 else f"mean ± sd over {ns[0]}-{ns[-1]} seeds"


def missing_text(missing: Sequence[Tuple[str, str, str]], rows: Sequence[str], cols: Sequence[str],
                 what: str = "not drawn", every: Tuple[str, str] = ("every row", "every length")) -> str:
    """The note of a panel's empty cells: ``missing`` holds ``(row, column, reason)`` per empty cell; cells with
    one reason are named together (``every row at 32k``, ``alpha=0.1 at every length``, ``base at 8k, 16k``;
    ``every``: the words for all rows, all columns), one line per reason: ``"not drawn: every row at 32k: the text
    could not fill the length: ..."``."""
    if not missing:
        return ""
    by_reason: Dict[str, Dict[str, List[str]]] = {}
    for row, col, reason in missing:
        by_reason.setdefault(reason, {}).setdefault(row, []).append(col)
    lines = []
    for reason, where in by_reason.items():
        col_sets = {tuple(c) for c in where.values()}
        if len(col_sets) == 1:  # the same columns in every row named: one phrase
            cs = list(next(iter(col_sets)))
            who = every[0] if len(where) == len(rows) and len(rows) > 1 else ", ".join(where)
            at = every[1] if len(cs) == len(cols) and len(cols) > 1 else ", ".join(cs)
            place = f"{who} at {at}"
        else:
            place = "; ".join(f"{r} at {', '.join(c)}" for r, c in where.items())
        lines.append(f"{place}: {reason}")
    return f"{what}: " + "\n".join(lines) if len(lines) == 1 else f"{what}:\n" + "\n".join(lines)
