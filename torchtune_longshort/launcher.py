"""What a launcher (``torchrun``, ``accelerate launch``) tells a process through its environment: how many processes
it started and this one's rank: the package's one reader of ``WORLD_SIZE`` / ``RANK`` (the recipe, its config check,
refusals, the eval pack's console logging). Read without torch, so a light module can ask."""

from __future__ import annotations

import os


def launched_world_size() -> int:
    """The number of processes a launcher started (``WORLD_SIZE``; 1 without a launcher)."""
    return int(os.environ.get("WORLD_SIZE") or 1)


def launched_rank() -> int:
    """This process's rank among the launcher's (``RANK``, which ``torchrun`` and ``accelerate launch`` set, and
    which ``torch.distributed`` gives back); 0 without a launcher."""
    return int(os.environ.get("RANK") or 0) if launched_world_size() > 1 else 0
