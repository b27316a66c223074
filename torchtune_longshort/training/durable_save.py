"""Writes that survive a crash: a ``torch.save`` put in place whole (:func:`atomic_torch_save`), a folder's renames
made durable (:func:`fsync_dir`); for the step checkpoints of :mod:`.checkpointing`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import torch


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary file (``<name>.tmp``, flushed to the disk) and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(path: Path) -> None:
    """Flush ``path``'s entries (a rename into it) to the disk; a folder that cannot be opened or flushed is
    left as it is."""
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
