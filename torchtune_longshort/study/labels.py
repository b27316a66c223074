"""How the study's figures and tables name what they show: the seed count of a point, an ``e`` range, a loss row."""

from __future__ import annotations


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
