"""How a study is stopped: SIGINT (Ctrl-C) or SIGTERM (``kill``, a scheduler) to the study's process, or to its whole
process group, stops the grid the same way. The study forwards each signal it gets to its running stage subprocesses
(a recipe finishes its step and saves; one it also got from the group within 1 s is the same stop there,
:mod:`torchtune_longshort.training.stop_signals`), and the first one raises :class:`StudySignal` in the main thread,
where the grid waits for the running stages and records them as interrupted. No stage starts after it."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterator, List, Optional, Sequence, Tuple, Type

from torchtune_longshort.output_guard import stops_held
from torchtune_longshort.refusals import Stopped

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)

_running: Dict[int, subprocess.Popen] = {}  # the stage subprocesses now running, by pid
_received = {"signum": 0}  # the first stop signal of this study's run, 0 while none


# the study got SIGINT or SIGTERM: handled as Ctrl-C is (a KeyboardInterrupt with the signal)
StudySignal = Stopped


def _libc_prctl() -> Optional[Callable[..., int]]:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()  # looked up here: a forked child calls nothing that may need a lock another thread held
_PR_SET_PDEATHSIG = 1


def ends_with_study() -> Optional[Callable[[], None]]:
    """A ``preexec_fn`` for a stage subprocess (None where Linux's ``prctl`` is missing): the stage gets SIGTERM when
    the thread that started it ends, which waits for it, so only when the study dies without a word (``kill -9``,
    the out-of-memory killer): a fine-tune went on training unseen, holding its run's lock, and the study's rerun
    failed that run as "in use by another run". SIGTERM: the recipe saves its step and exits, the rerun resumes."""
    if _PRCTL is None:
        return None
    study = os.getpid()

    def preexec() -> None:
        _PRCTL(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != study:  # the study died before the call
            os.kill(os.getpid(), signal.SIGTERM)
    return preexec


def received() -> int:
    """The first stop signal the study got under :func:`stop_handlers` (0: none, or outside it)."""
    return _received["signum"]


def _forward(signum: int, proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signum)


@contextlib.contextmanager
def running(proc: subprocess.Popen) -> Iterator[None]:
    """Registers a stage subprocess while it runs, so that a stop reaches it; one started after a stop was received
    gets that stop at once."""
    _running[proc.pid] = proc
    try:
        if received():  # the stop came between the check before the start and here
            _forward(received(), proc)
        yield
    finally:
        _running.pop(proc.pid, None)


@contextlib.contextmanager
def stop_handlers() -> Iterator[None]:
    """SIGINT / SIGTERM handlers for the study's run (main thread only; elsewhere a no-op): each signal is forwarded
    once to every running stage subprocess; the first raises :class:`StudySignal`."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        for proc in list(_running.values()):
            _forward(signum, proc)
        if not _received["signum"]:
            _received["signum"] = signum
            raise StudySignal(signum)

    _received["signum"] = 0
    before = {s: signal.signal(s, handler) for s in STOP_SIGNALS}
    try:
        yield
    finally:
        for s, h in before.items():
            signal.signal(s, h)
        _received["signum"] = 0  # a later run in this process (a test's) starts unstopped


def run_until_stopped(jobs: int, calls: Sequence[Callable[[], Any]], stopping: threading.Event,
                      stop_errors: Tuple[Type[BaseException], ...] = ()) -> Tuple[List[Any], Optional[BaseException]]:
    """Each call on a pool of ``jobs`` threads: ``(results in order, the stop or None)``. A stop (Ctrl-C, SIGTERM
    under :func:`stop_handlers`: a ``KeyboardInterrupt`` in this thread; or one of ``stop_errors`` from a call) sets
    ``stopping``, which the calls not started yet check, and the running ones are waited for, a second stop too;
    a call a stop ended gives None. The pool starts its threads with the stops held
    (:func:`~torchtune_longshort.output_guard.stops_held`): ``submit`` starts a thread before it registers it, and a
    stop raised in between left that thread's call running unwaited-for."""
    results: List[Any] = []
    stopped: Optional[BaseException] = None
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        try:
            with stops_held():
                futures = [pool.submit(call) for call in calls]
        except KeyboardInterrupt as e:
            stopping.set()
            stopped = e
        for fut in futures:
            while True:
                try:
                    results.append(fut.result())
                    break
                except stop_errors as e:  # the call saw the stop: it recorded itself
                    stopping.set()
                    stopped = stopped or e
                    results.append(None)
                    break
                except KeyboardInterrupt as e:  # here: the running calls finish
                    stopping.set()
                    stopped = stopped or e
    return results, stopped
