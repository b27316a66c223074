"""Functions for ``worker_pool.unordered``'s workers in tests (pickled by reference: the spawned workers import
this module)."""

from __future__ import annotations

import os
import signal
import threading


def killed_after_returning(x: int) -> int:
    """``x``, then this worker is killed 0.3 s later, idle (the out-of-memory killer picks the largest process)."""
    threading.Timer(0.3, os.kill, (os.getpid(), signal.SIGKILL)).start()
    return x


class TwoArguments(Exception):
    """An exception that pickles but does not unpickle: its ``args`` are not its ``__init__``'s arguments."""

    def __init__(self, what: str, why: str):
        super().__init__(f"{what}: {why}")


def raises_two_arguments(x: int) -> int:
    raise TwoArguments(f"item {x}", "no luck")


def exits_with(x: int) -> int:
    """A run that ends its own process with status ``x`` (``sys.exit`` deep in a library, ``os._exit``)."""
    os._exit(x)
