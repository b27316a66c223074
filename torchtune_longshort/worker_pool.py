"""Run a function over items in spawned worker processes that every way out of the call ends at once.

``multiprocessing.Pool`` (what the synthetic figures used) could hang for good on a stop: a scheduler's SIGTERM to the
process group killed an idle worker while it held the lock of the pool's shared task queue, and ``Pool.terminate``
then waited for that lock forever; Ctrl-C printed each worker's KeyboardInterrupt traceback; a worker killed alone
(the out-of-memory killer) lost its task, and the pool waited for its result forever. Here each worker has a pipe of
its own (no lock shared between processes), ignores Ctrl-C (the parent stops the workers: SIGINT reaches the whole
foreground group), and is killed by the parent however the call ends: its last result, an error, a stop, a loop
left early. A worker that dies ends the call in :class:`WorkerDied`; one whose parent was killed leaves within a
second (it would have trained on, unseen).
"""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import Connection, wait
from multiprocessing.pool import ExceptionWithTraceback
from multiprocessing.reduction import ForkingPickler
from typing import Callable, Dict, Iterable, Iterator, Optional, TypeVar

T = TypeVar("T")
R = TypeVar("R")


class WorkerDied(RuntimeError):
    """A worker process ended without its result (killed from outside: the out-of-memory killer, a SIGKILL)."""


def unordered(fn: Callable[[T], R], items: Iterable[T], workers: int,
              initializer: Optional[Callable[[], None]] = None) -> Iterator[R]:
    """``fn(item)`` for each of ``items`` in ``min(workers, len(items))`` spawned processes, each result yielded as it
    comes (as ``Pool.imap_unordered``; ``fn`` and ``initializer`` are module-level functions, ``initializer`` run
    once in each worker). An exception ``fn`` raises is raised here, with the worker's traceback as its cause.
    Iterate it inside ``contextlib.closing(...)``: a loop left early (its body raised, a stop) then ends the workers
    at once, not when the generator is collected."""
    items = list(items)
    if not items:
        return
    ctx = multiprocessing.get_context("spawn")
    procs: Dict[Connection, multiprocessing.process.BaseProcess] = {}
    try:
        _start(ctx, min(workers, len(items)), fn, initializer, procs)
        todo, busy = iter(items), set()
        for conn in procs:
            if not _hand_out(conn, todo, busy):
                raise WorkerDied(_death(procs[conn]))
        while busy:
            for conn in wait(list(busy)):  # a result, or the end of the pipe of a worker that died
                try:
                    ok, value = conn.recv()
                except (EOFError, OSError):
                    raise WorkerDied(_death(procs[conn])) from None
                busy.discard(conn)
                if not ok:
                    raise value
                handed = _hand_out(conn, todo, busy)
                yield value  # a worker killed since it sent this result: the result is still the caller's
                if not handed:
                    raise WorkerDied(_death(procs[conn]))
    finally:
        for p in procs.values():
            if p.is_alive():
                p.kill()
        for conn, p in procs.items():
            p.join()
            conn.close()


def _start(ctx, n: int, fn, initializer, procs: Dict) -> None:
    """Start ``n`` workers into ``procs`` ({pipe: process}). SIGINT is ignored while they start: a spawned process
    inherits an ignored signal (not a blocked one, nor a handler), so that Ctrl-C never interrupts a worker (not even
    in its imports); the parent misses a Ctrl-C only in those milliseconds."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN) if _main_thread() else None
    try:
        for _ in range(n):
            here, there = ctx.Pipe()
            p = ctx.Process(target=_serve, args=(there, fn, initializer, os.getpid()), daemon=True)
            p.start()
            procs[here] = p
            there.close()  # the worker's end, held by the worker alone: its death reads as the end of the pipe
    finally:
        if previous is not None:
            signal.signal(signal.SIGINT, previous)


def _main_thread() -> bool:
    return threading.current_thread() is threading.main_thread()


def _hand_out(conn: Connection, todo: Iterator, busy: set) -> bool:
    """Send ``conn``'s worker the next item (it is then busy), or None (it leaves) when none is left. False when the
    worker is gone and an item was left for it: killed after its last result (the out-of-memory killer picks the
    largest process, an idle one too), its pipe's end is closed (``BrokenPipeError``, which ended the call in its
    traceback); gone with nothing left to do, it is not missed."""
    nxt = next(todo, _NONE)
    try:
        conn.send(None if nxt is _NONE else (nxt,))
    except (BrokenPipeError, ConnectionResetError):  # no process reads the pipe
        return nxt is _NONE
    if nxt is not _NONE:
        busy.add(conn)
    return True


_NONE = object()


def _death(p) -> str:
    p.join(5)
    code = p.exitcode
    signalled = code is not None and code < 0 and -code in signal.valid_signals()
    how = f"was killed by {signal.Signals(-code).name}" if signalled else f"exited with status {code}"
    why = (" (the out-of-memory killer sends SIGKILL: fewer workers need less memory)"
           if signalled and -code == signal.SIGKILL else "")  # an exit status is the run's own (sys.exit, os._exit)
    return f"worker process {p.pid} {how} before it returned its result{why}"


def _serve(conn: Connection, fn, initializer, parent: int) -> None:
    """A worker: ``fn`` of each item its pipe brings, until None or the pipe's end."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    threading.Thread(target=_leave_when_orphaned, args=(parent,), daemon=True).start()
    if initializer is not None:
        initializer()
    while True:
        try:
            item = conn.recv()
        except (EOFError, OSError):
            return
        if item is None:
            return
        try:
            out = (True, fn(item[0]))
        except Exception as e:
            out = (False, ExceptionWithTraceback(e, e.__traceback__))
        try:
            conn.send_bytes(_pickled(out, fn))
        except (EOFError, OSError):
            return


def _pickled(out: tuple, fn) -> bytes:
    """``out`` (ok, result or exception) pickled for the parent's ``recv``. A result that does not pickle (a local
    function), or an exception that does not pickle or does not unpickle (its ``__init__`` takes other arguments than
    its ``args``: the parent's ``recv`` ended the call in that ``TypeError``, naming neither ``fn`` nor what it
    raised), is sent as a ``RuntimeError`` saying so, an exception's with the worker's traceback. A result is not
    read back here: a tensor's storage travels by a shared handle that is taken once."""
    try:
        data = ForkingPickler.dumps(out)
        if not out[0]:
            ForkingPickler.loads(data)
        return data
    except Exception as e:
        ok, value = out
        what = "its result" if ok else f"the {type(value.exc).__name__} it raised ({value.exc})"
        error = RuntimeError(f"{getattr(fn, '__name__', fn)}: {what} could not be sent back: {type(e).__name__}: {e}")
        if not ok:
            value.exc = error  # the worker's traceback kept: ExceptionWithTraceback's text
        return ForkingPickler.dumps((False, value if not ok else error))


def _leave_when_orphaned(parent: int) -> None:
    """End this worker once its parent is gone (killed alone by SIGKILL: nothing told the workers)."""
    while os.getppid() == parent:
        time.sleep(1.0)
    os._exit(1)
