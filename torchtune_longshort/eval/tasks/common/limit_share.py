"""lm-eval's ``--limit`` as a task's data sees it, while lm-eval builds the task.

lm-eval builds a task's documents (its ``custom_dataset``) before it applies ``--limit``, which then keeps the first
N. A length whose source gives fewer sequences than ``<prefix>_num_samples`` would be NaN, though ``--limit N`` asks
for no more than N of them: ``lm-eval ... --tasks longshort_ppl --metadata '{"max_seq_lengths": "64k"}' --limit 1``
scored nothing ('only 4 of num_samples=20 ...'). :func:`within_limit` scores such a length with the first N
sequences, the ones a source with enough text would give first, and says so.
"""

from __future__ import annotations

import logging
import sys
from typing import Callable, List, Optional, TypeVar

from torchtune_longshort.eval.console_log import ALIKE_ON_EVERY_RANK
from torchtune_longshort.eval.tasks.common.unavailable import TooFewSequences

logger = logging.getLogger(__name__)
T = TypeVar("T")


def document_limit() -> Optional[int]:
    """The ``limit`` of the lm-eval evaluator call building this task (``simple_evaluate``, which the ``lm-eval``
    and ``longshort-eval`` command lines call, or ``evaluate``), where it is a count of documents; None for none, a
    fraction (its count depends on the documents built) or a task built outside those calls."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "lm_eval.evaluator" and "limit" in frame.f_locals:
            limit = frame.f_locals["limit"]
            return int(limit) if isinstance(limit, (int, float)) and limit >= 1 else None
        frame = frame.f_back
    return None


def within_limit(where: str, err: TooFewSequences, num_samples: int, cut: Callable[[int], List[T]]) -> List[T]:
    """The sequences to score at a length whose source gave fewer than ``num_samples`` (``err``): ``cut(n)``'s
    first ``n`` when this run's ``--limit n`` (a count) asks for fewer than ``num_samples`` (a length never gets
    more than ``n`` of the first ``n`` documents), with a warning; else ``err`` again (the length is NaN with it).
    ``where``: the task and length (``longshort_ppl at length 64k``)."""
    limit = document_limit()
    if limit is None or limit >= num_samples:
        raise err
    try:
        got = cut(limit)
    except TooFewSequences:
        raise err from None
    logger.warning("%s: %s; --limit %d scores the first %d, as a source with enough text would (without --limit "
                   "this length is NaN: %s)", where, err.finding, limit,
                   len(got), err.hint, extra=ALIKE_ON_EVERY_RANK)
    return got
