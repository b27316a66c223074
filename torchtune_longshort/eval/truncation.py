"""Prompt truncation to a token budget: who may cut a prompt that is longer than the model, and how.

A cut prompt is scored as if it were the task, so by default nothing is cut: the ``longshort`` model refuses a
prompt longer than it runs (NaN with the reason, :mod:`torchtune_longshort.eval.unavailable`). A task whose
benchmark protocol truncates says so in each of its docs, under :data:`TRUNCATION_FIELD`: LongBench (and
LongBench-E) report scores with *middle* truncation (a prompt longer than the budget keeps its first and last
halves, so the instruction at the start and the question at the end both survive), so the LongBench-E loader
marks its docs ``"middle"``. The passkey docs say ``"none"``: a cut passkey prompt can keep a needle near its end
and inflate the score. For tasks that say nothing, the ``longshort`` model's ``truncation`` argument decides:
``none`` (default: refuse), or ``left`` (lm-eval's ``hf`` model: keep the last tokens) / ``middle``, as an explicit
choice that applies to those tasks only.
"""

from __future__ import annotations

from typing import Any, List, Mapping, Optional, Sequence

TRUNCATION_SIDES = ("left", "middle")
# "none": never cut, refuse instead.
TRUNCATION_POLICIES = ("none", *TRUNCATION_SIDES)
# The doc field in which a task declares its benchmark's truncation protocol (one of TRUNCATION_POLICIES).
TRUNCATION_FIELD = "prompt_truncation"


def check_truncation(truncation: str) -> str:
    """Validate a truncation policy name; returns it unchanged or raises ``ValueError`` naming what is accepted."""
    if truncation not in TRUNCATION_POLICIES:
        raise ValueError(f"truncation={truncation!r} is not supported; accepted: {', '.join(TRUNCATION_POLICIES)}")
    return truncation


def declared_truncation(doc: Optional[Mapping[str, Any]]) -> Optional[str]:
    """The truncation policy a task declares in ``doc`` (``None``: the task says nothing)."""
    value = (doc or {}).get(TRUNCATION_FIELD)
    return check_truncation(str(value)) if value else None


def truncate_tokens(tokens: Sequence[int], budget: int, truncation: str = "left") -> List[int]:
    """Cut ``tokens`` to at most ``budget`` tokens.

    Args:
        tokens: token ids.
        budget: the most tokens to keep (>= 1).
        truncation: ``"left"`` keeps the last ``budget`` tokens (lm-eval's ``hf`` model);
            ``"middle"`` keeps the first ``budget // 2`` and the last ``budget - budget // 2`` tokens
            (LongBench's ``pred.py``, which splits the budget in two halves).

    Returns:
        A new list; ``tokens`` unchanged when it already fits.
    """
    if truncation not in TRUNCATION_SIDES:
        raise ValueError(f"truncation={truncation!r} cannot cut a prompt; accepted: {', '.join(TRUNCATION_SIDES)}")
    if not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget={budget!r} must be an int >= 1")
    tokens = list(tokens)
    if len(tokens) <= budget:
        return tokens
    if truncation == "left":
        return tokens[-budget:]
    head = budget // 2
    tail = budget - head
    return tokens[:head] + tokens[len(tokens) - tail :]
