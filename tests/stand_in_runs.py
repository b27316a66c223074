"""A stand-in for the synthetic figures' per-run worker (``experiments._worker``), imported by the worker processes
(pickled by reference): the identity run returns at once, the other waits to be stopped, or with
``STAND_IN_RUN_DIES=1`` kills its own process (as the out-of-memory killer would)."""

from __future__ import annotations

import os
import signal
import time
from dataclasses import asdict


def run(cfg) -> dict:
    if cfg.outrep == "identity":
        return {"config": asdict(cfg)}
    if os.environ.get("STAND_IN_RUN_DIES"):
        os.kill(os.getpid(), signal.SIGKILL)
    time.sleep(600)
    return {"config": asdict(cfg)}
