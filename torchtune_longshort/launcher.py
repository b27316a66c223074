"""What a launcher (``torchrun``, ``accelerate launch``) tells a process through its environment: how many processes
it started, this one's rank and its rank on this machine: the package's one reader of ``WORLD_SIZE`` / ``RANK`` /
``LOCAL_RANK`` (the recipe, its config check, refusals, the eval pack's console logging and devices). Read without
torch, so a light module can ask.

An empty variable reads as unset. A value no launcher sets (``WORLD_SIZE=abc`` or ``0`` left in a user's shell) is
refused as bad input (a ``ValueError`` naming the variable, which every command tells in one line, exit status 2),
instead of ``int()``'s message naming no variable, or a ``ZeroDivisionError`` further on."""

from __future__ import annotations

import os
from typing import Optional

# torchrun's agent gives each worker a run id (outside torchrun: none)
ELASTIC_RUN_ID = "TORCHELASTIC_RUN_ID"


def _launched(name: str, default: int, low: int, high: Optional[int], what: str) -> int:
    """``$name`` as an integer in ``[low, high)`` (``default`` when unset or empty); else a ``ValueError`` naming it."""
    text = os.environ.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < low or (high is not None and value >= high):
        accepted = f"{low}..{high - 1}" if high is not None else f"an integer >= {low}"
        raise ValueError(f"environment variable {name}={text!r}: expected {accepted} ({what}, as a launcher such as "
                         f"torchrun sets it); unset WORLD_SIZE to run one process without a launcher")
    return value


def launched_world_size() -> int:
    """The number of processes a launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    return _launched("WORLD_SIZE", 1, 1, None, "the number of processes")


def launched_rank() -> int:
    """This process's rank among the launcher's (``RANK``, which ``torchrun`` and ``accelerate launch`` set, and
    which ``torch.distributed`` gives back); 0 without a launcher."""
    world = launched_world_size()
    return _launched("RANK", 0, 0, world, f"this process's rank among WORLD_SIZE={world}") if world > 1 else 0


def launched_local_rank() -> int:
    """This process's rank among the launcher's processes on this machine (``LOCAL_RANK``: the GPU it takes); 0
    without a launcher."""
    if launched_world_size() == 1:
        return 0
    return _launched("LOCAL_RANK", 0, 0, None, "this process's rank on this machine")


def torchrun_worker() -> bool:
    """Whether torchrun's agent started this process (``tune run --nproc_per_node N`` runs its workers through it)."""
    return bool(os.environ.get(ELASTIC_RUN_ID))
