"""SIGTERM / SIGINT (a job scheduler's time limit, Ctrl-C) end a training run after the current step, with a save."""

from __future__ import annotations

import signal
import threading

import torch


class StopSignals:
    """Records the first SIGTERM / SIGINT once :meth:`install` ran; a second one stops at once (KeyboardInterrupt)."""

    def __init__(self) -> None:
        self.signum = 0

    def install(self) -> None:
        """Install the handlers (only possible from the main thread; elsewhere signals keep their defaults)."""
        self.signum = 0

        def handler(signum, frame):
            if self.signum:  # a second signal: stop now, as the default handler would
                raise KeyboardInterrupt
            self.signum = signum

        if threading.current_thread() is threading.main_thread():
            for sig in (signal.SIGTERM, signal.SIGINT):
                signal.signal(sig, handler)

    def received(self, distributed: bool, device: torch.device) -> int:
        """The signal any rank received, 0 if none (all ranks stop at the same step)."""
        flag = self.signum
        if distributed:
            t = torch.tensor([flag], device=device)
            torch.distributed.all_reduce(t, op=torch.distributed.ReduceOp.MAX)
            flag = int(t.item())
        return flag

    @staticmethod
    def name(signum: int) -> str:
        return signal.Signals(signum).name
