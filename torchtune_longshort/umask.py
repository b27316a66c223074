"""The process's file-mode creation mask, read without changing it: ``os.umask`` can only read it by setting
another, and a thread that creates a file in between (a data loader's worker, a checkpoint writer) gets mode 0666 or
0777, whatever the user's umask."""

from __future__ import annotations

import os

# Linux (>= 4.7) reports it here; where the line is missing, the old way is the only one
_STATUS = "/proc/self/status"


def current_umask() -> int:
    """The umask (``0o022`` under the usual one), as ``os.umask`` would return it, read from ``/proc/self/status``'s
    ``Umask:`` line without changing it; where that file or line is missing, by ``os.umask`` (set, then restored)."""
    try:
        with open(_STATUS) as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0)
    os.umask(mask)
    return mask
