"""SIGTERM / SIGINT (a job scheduler's time limit, Ctrl-C) end a training run after the current step, with a save.

One stop can arrive twice: torchrun's launcher forwards the signal it gets to every worker, and a scheduler that
signals every process of a job (SLURM at its time limit, ``scancel``) has already sent the workers the same one; so
does a wrapper that forwards a signal its child also got from the terminal. A second signal within
:data:`REPEAT_WINDOW_S` of the first is taken for that same stop; one later than that stops at once, unsaved.

The first says so at once, in one line on stderr (a step of a large model takes minutes, and Ctrl-C that printed
nothing was pressed again); the second raises :class:`~torchtune_longshort.refusals.Stopped`, which the recipe ends
in one line naming the last saved step (:func:`at_once`)."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Callable, List, Optional, Sequence

import torch

from torchtune_longshort.refusals import Stopped
from torchtune_longshort.training.checkpointing import StepCheckpoints

# seconds after the first signal during which another is the same stop delivered twice (a launcher forwards within
# milliseconds; a person's second Ctrl-C, meant to stop at once, comes later)
REPEAT_WINDOW_S = 1.0
# the signals that stop a run, in the order of :meth:`StopSignals.flags`
STOPPING = (signal.SIGINT, signal.SIGTERM)


class StopSignals:
    """Records the first SIGTERM / SIGINT once :meth:`install` ran, and says which step it finishes and saves
    (:meth:`announcement`); another one more than :data:`REPEAT_WINDOW_S` later stops at once
    (:class:`~torchtune_longshort.refusals.Stopped`, a KeyboardInterrupt). ``step``: the step a stop received now
    finishes and saves (None: say nothing, as on the ranks but the first under torchrun); ``clock``: the monotonic
    clock (a test's stand-in)."""

    def __init__(self, step: Optional[Callable[[], int]] = None, clock=time.monotonic,
                 saving: Optional[Callable[[], bool]] = None) -> None:
        self.signum = 0
        self._first_at = 0.0
        self._step = step
        self._saving = saving  # whether that step's save is being written now
        self._clock = clock

    def install(self) -> None:
        """Install the handlers (only possible from the main thread; elsewhere signals keep their defaults)."""
        self.signum = 0

        def handler(signum, frame):
            now = self._clock()
            if not self.signum:
                self.signum, self._first_at = signum, now
                if self._step is not None:
                    _say(self.announcement(signum, self._step(), bool(self._saving and self._saving())))
            elif now - self._first_at > REPEAT_WINDOW_S:  # asked again: stop now, as the default handler would
                raise Stopped(signum)

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

    def flags(self) -> List[float]:
        """This process's signal as one count per :data:`STOPPING` signal (1.0 for the one received, else 0.0): summed
        over ranks in the step's one all-reduce (:func:`~torchtune_longshort.training.metrics.mean_over_ranks`),
        and :meth:`first_of` reads it back."""
        return [1.0 if self.signum == s else 0.0 for s in STOPPING]

    @staticmethod
    def first_of(counts: Sequence[float]) -> int:
        """The signal of :meth:`flags` summed over ranks: the largest signal number any rank received (what the
        MAX all-reduce of :meth:`received` gives), 0 if none."""
        return max((int(s) for s, n in zip(STOPPING, counts) if n > 0), default=0)

    @staticmethod
    def name(signum: int) -> str:
        return signal.Signals(signum).name

    @staticmethod
    def announcement(signum: int, step: int, saving: bool = False) -> str:
        """The line the first stop signal prints at once: the step it finishes and saves (``saving``: whose save is
        being written now, after which the run stops), and how to stop sooner."""
        name = StopSignals.name(signum)
        again = "press Ctrl-C again" if signum == signal.SIGINT else f"another {name} 1 s later"
        if saving:
            return f"{name}: saving step {step}, then stopping; {again} to stop now without saving it"
        return f"{name}: finishing step {step}, then saving it; {again} to stop now without saving it"


def stopped_line(signum: int, step: int, max_steps: int, saved: str) -> str:
    """The line a run stopped by a signal ends with, once ``step`` is saved at ``saved``: resume continues it, unless
    ``step`` is the run's last (``max_steps``, the steps the recipe trains) and the run is finished, ``saved`` its
    final checkpoint (``resume=True`` would only say "Nothing to train")."""
    said = f"{StopSignals.name(signum)} received: finished step {step}, saved {saved}"
    if step >= max_steps:
        return f"{said}; that was the run's last step: the run is finished, and {saved} is its final checkpoint"
    return f"{said}; continue with resume=True"


def at_once(ckpts: StepCheckpoints) -> str:
    """What a run stopped at once by a second signal leaves (the end of its one line): a save cut short leaves the
    step before it standing (the saves are written aside and renamed into place), as a kill -9 does."""
    return f"stopped at once, without saving the step in progress: {ckpts.standing()}"


def _say(line: str) -> None:
    """``line`` on stderr from a signal handler: one write to the file descriptor (the handler may run inside a write
    of ``sys.stderr``'s buffer, which a second write would find in use), on a line of its own below a progress bar."""
    tqdm = sys.modules.get("tqdm")
    bar = bool(getattr(getattr(tqdm, "tqdm", None), "_instances", ()))
    with contextlib.suppress(OSError):
        os.write(2, f"{chr(10) if bar else ''}{line}\n".encode())
