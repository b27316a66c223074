"""Out of memory in an evaluation never sinks the run: a batch that does not fit is run again one request at a time,
and a request that does not fit alone is scored NaN with the reason (its task's other requests, other lengths and
other tasks go on), as a request longer than the model runs is. lm-eval's ``hf`` stops the whole run instead.
"""

from __future__ import annotations

from typing import Callable, Optional, Sequence, TypeVar

import torch

from torchtune_longshort.devices import out_of_memory_in, release_cached

T = TypeVar("T")


def _attempt(run: Callable[[Sequence[T]], None], items: Sequence[T]) -> Optional[str]:
    """``run(items)``: None, or the out-of-memory error it raised, on one line."""
    error = out_of_memory_in(lambda: run(items))[1]
    return None if error is None else error[:240]


def run_fitting(items: Sequence[T], run: Callable[[Sequence[T]], None], alone: Callable[[T, str], None],
                device: torch.device) -> None:
    """``run(items)`` (a batch); out of memory there, ``run`` on each item alone, and ``alone(item, error)`` for an
    item that does not fit by itself."""
    error = _attempt(run, items)
    if error is None:
        return
    release_cached(device)
    if len(items) == 1:
        alone(items[0], error)
        return
    for item in items:
        error = _attempt(run, [item])
        if error is not None:
            release_cached(device)
            alone(item, error)


def out_of_memory_reason(n_tokens: int, device: torch.device, error: str) -> str:
    """The reason a request that does not fit the device carries."""
    return (f"out of memory at {n_tokens:,} tokens on {device} ({error}): scored NaN; a shorter length, or a device "
            "with more memory, runs it")
