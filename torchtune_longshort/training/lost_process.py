"""Another process of a torchrun job lost (``kill -9``, the kernel's out-of-memory killer, its machine gone): the
collective the others wait in fails with the backend's error (gloo: ``Connection reset by peer``, NCCL:
``DistBackendError``), a hundred lines of C++ and Python stack. The processes that survive end in one line instead:
which process error it was, and what stands (the saves are written aside and renamed into place, so the last saved
step is whole); torchrun's own report after it names how the lost one ended."""

from __future__ import annotations

from typing import Callable, Optional, TypeVar

import torch

from torchtune_longshort.refusals import Refusal

T = TypeVar("T")
# what gloo's and NCCL's socket errors say when the process at the other end is gone
PEER_GONE = ("Connection reset by peer", "Connection closed by peer", "Broken pipe")


class LostProcess(Refusal, RuntimeError):
    """A collective failed because another process of the run is gone; the message says what stands."""


def lost_process(error: BaseException) -> Optional[str]:
    """The brief name of ``error`` (``"gloo: Connection reset by peer"``) when it is a collective's failure because
    another process of the run is gone: a ``DistBackendError``, or a ``RuntimeError`` of gloo or NCCL that says the
    peer closed its connection. None for any other error, and outside a process group."""
    dist = torch.distributed
    if not (dist.is_available() and dist.is_initialized()):
        return None
    text = str(error)
    backend = "NCCL" if "nccl" in text.lower() else "gloo" if "gloo" in text.lower() else type(error).__name__
    gone = next((s for s in PEER_GONE if s in text), None)
    if isinstance(error, getattr(dist, "DistBackendError", ())):
        return f"{backend}: {gone or ' '.join(text.split())[:100]}"
    return f"{backend}: {gone}" if isinstance(error, RuntimeError) and gone and backend != "RuntimeError" else None


def lost_processes(run: Callable[[], T], stands: Callable[[], str], when: str = "") -> T:
    """``run()``; a collective's error for a lost process (:func:`lost_process`) is raised as :class:`LostProcess`:
    ``another process of this run was lost<when> (<error>; ...): <stands()>``."""
    try:
        return run()
    except Exception as e:
        brief = lost_process(e)
        if brief is None:
            raise
        raise LostProcess(f"another process of this run was lost{when} ({brief}; torchrun's report below says how it "
                          f"ended): {stands()}") from None
