"""A disk that fills up, told in one line instead of a writer's traceback, and checked before a run writes.

Every writer says it differently: ``open().write`` raises ``OSError`` with ``errno`` ``ENOSPC`` (or ``EDQUOT`` at a
quota, ``EFBIG`` past ``ulimit -f``), safetensors' ``save_file`` a ``SafetensorError`` "I/O error: No space left on
device (os error 28)", ``torch.save`` a ``RuntimeError`` "PytorchStreamWriter failed writing file ...".
:func:`is_out_of_space` knows them all (it reads the exception chain), :func:`room` says what a folder's file system
has, and :func:`check_room` refuses a write that cannot fit before it starts.

``refusals.refusing`` turns an out-of-space error at any entry point into its one line (exit status 2); the recipe
says besides which checkpoint stands (``training.out_of_space``), and ``longshort-eval`` that lm-eval's results were
not written (lm-eval only logs a warning and exits 0).
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from pathlib import Path
from typing import Iterator, Optional, Tuple, Union

PathLike = Union[str, Path]
OUT_OF_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# What the writers that do not raise an OSError put in their message for the same errors (safetensors' Rust error
# names the OS error; torch's stream writer says only that the write failed).
_TEXTS = ("no space left on device", "disk quota exceeded", "file too large", "os error 28", "os error 122",
          "file write failed")
FULL_BELOW = 1 << 20  # a disk with less free than this is full for any checkpoint or results file


def is_out_of_space(error: BaseException, where: Optional[PathLike] = None) -> bool:
    """True when ``error`` (or an exception it was raised from) is a write that found no room on its disk; with
    ``where`` (the folder being written), also a write error whose message does not say why (``torch.save`` to a path:
    "unexpected pos ...") while that folder's disk has less than :data:`FULL_BELOW` bytes free."""
    if where is not None and isinstance(error, (OSError, RuntimeError)) and is_full(where):
        return True
    for e in chain(error):
        if isinstance(e, OSError) and e.errno in OUT_OF_SPACE_ERRNOS:
            return True
        text = str(e).lower()
        if any(t in text for t in _TEXTS) and not isinstance(e, (MemoryError, ValueError)):
            return True
    return False


def chain(error: Optional[BaseException]) -> Iterator[BaseException]:
    """``error`` and the exceptions it was raised from (``__cause__``, else ``__context__``), each once: a chain that
    loops (``raise a from b`` after ``raise b from a``) ends where it comes back."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__


def is_full(path: PathLike) -> bool:
    """Whether ``path``'s disk has less than :data:`FULL_BELOW` free (False when it cannot be read)."""
    try:
        return room(path)[0] < FULL_BELOW
    except OSError:
        return False


def existing_parent(path: PathLike) -> Path:
    """``path`` or its nearest folder above that exists (where a file to be written would land)."""
    p = Path(os.path.abspath(os.fspath(path)))
    while not p.exists() and p != p.parent:
        p = p.parent
    return p


def mount_point(path: PathLike) -> Path:
    """The mount point of the file system ``path`` lies on."""
    p = existing_parent(path)
    while not os.path.ismount(p) and p != p.parent:
        p = p.parent
    return p


def room(path: PathLike) -> Tuple[int, int, Path]:
    """``(free bytes, total bytes, mount point)`` of the file system ``path`` (or the folder above it) lies on; the
    free bytes are those this user may write (``statvfs``' ``f_bavail``, without the root reserve)."""
    usage = shutil.disk_usage(existing_parent(path))
    return int(usage.free), int(usage.total), mount_point(path)


def size_text(nbytes: float) -> str:
    """``nbytes`` in the largest unit that keeps it >= 1 (B, KiB, MiB, GiB, TiB), to 3 significant figures."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(nbytes) < 1024:
            return f"{nbytes:.0f} {unit}" if unit == "B" else f"{nbytes:.3g} {unit}"
        nbytes /= 1024
    return f"{nbytes:.3g} TiB"


def room_text(path: PathLike) -> str:
    """``"<free> free of <total> on <mount point>"`` for ``path``'s file system ("" when it cannot be read)."""
    try:
        free, total, mount = room(path)
    except OSError:
        return ""
    return f"{size_text(free)} free of {size_text(total)} on {mount}"


def written_file(error: BaseException) -> Optional[str]:
    """The file an out-of-space ``error`` was writing, when it names one (an ``OSError``'s ``filename``; a copy's
    destination, ``filename2``)."""
    for e in chain(error):
        if isinstance(e, OSError) and (e.filename2 or e.filename):
            return str(e.filename2 or e.filename)
    return None


@contextlib.contextmanager
def naming(path: PathLike) -> Iterator[None]:
    """An out-of-space error raised in the block that names no file (safetensors' "I/O error: No space left on device
    (os error 28)", a tokenizer library's) raised again as an ``OSError`` naming ``path``, what the block writes: its
    one line then says where (:func:`out_of_space_line`). Any other error passes as it is."""
    try:
        yield
    except Exception as e:
        if written_file(e) is not None or not is_out_of_space(e):
            raise
        code = next((c.errno for c in chain(e) if isinstance(c, OSError) and c.errno in OUT_OF_SPACE_ERRNOS),
                    errno.ENOSPC)
        raise OSError(code, os.strerror(code), os.fspath(path)) from e


def reason(error: BaseException) -> str:
    """What an out-of-space ``error`` says, on one line: the ``OSError`` it was raised from when there is one (torch's
    writer only says "unexpected pos ..."), else its own message."""
    e = next((c for c in chain(error) if isinstance(c, OSError) and c.errno in OUT_OF_SPACE_ERRNOS), None)
    if e is not None and e.strerror:  # the file is named by the message around it
        return f"[Errno {e.errno}] {e.strerror}"
    return " ".join(str(e if e is not None else error).split())[:200]


NO_ROOM = ("no space left on the disk", "free space there, or write to a disk with room")


def no_room(error: BaseException) -> Tuple[str, str]:
    """What an out-of-space ``error`` ran into and its fix: :data:`NO_ROOM` for a full disk; past ``ulimit -f``
    (``EFBIG``) or a quota (``EDQUOT``), where the disk may have room to spare, those instead."""
    import resource

    codes = {c.errno for c in chain(error) if isinstance(c, OSError)}
    text = " ".join(str(c).lower() for c in chain(error))
    if errno.EFBIG in codes or "file too large" in text or "os error 27" in text:
        limit = resource.getrlimit(resource.RLIMIT_FSIZE)[0]
        said = f"ulimit -f: {size_text(limit)}" if limit != resource.RLIM_INFINITY else "the file system's own limit"
        return (f"a file grew past the largest this process may write ({said})",
                "raise that limit (ulimit -f unlimited) or write to a file system that takes larger files")
    if errno.EDQUOT in codes or "disk quota exceeded" in text or "os error 122" in text:
        return "the disk quota is exceeded", "free space within your quota (quota -s), or write to a disk with room"
    return NO_ROOM


_ROOM_THEN = "_longshort_room_then"


def note_room(error: BaseException, where: Optional[PathLike] = None) -> None:
    """Keep on an out-of-space ``error`` the room of the disk it was writing (``where``'s, else the file it names),
    measured now: called before a cleanup frees what the failed write took, so that its line says the room the write
    found ("0 B free of 1 MiB ... when the write failed", :func:`room_then`), not the room the cleanup left ("1 MiB
    free of 1 MiB"). A room kept already (measured nearer the failure) stays."""
    target = where if where is not None else written_file(error)
    have = room_text(target) if target and is_out_of_space(error) else ""
    if have and not hasattr(error, _ROOM_THEN):
        with contextlib.suppress(AttributeError):  # an exception that takes no attribute: its room is measured later
            setattr(error, _ROOM_THEN, have)


def room_then(error: BaseException, where: Optional[PathLike], when: str) -> str:
    """The room :func:`note_room` kept on ``error`` (or an exception it was raised from: a writer's error raised
    again naming its file), said as ``"<room> when <when>"``; else ``where``'s room measured now ("" when there is
    neither)."""
    kept = next((getattr(e, _ROOM_THEN) for e in chain(error) if hasattr(e, _ROOM_THEN)), "")
    return f"{kept} when {when}" if kept else (room_text(where) if where else "")


def out_of_space_line(error: BaseException) -> str:
    """One line for an out-of-space ``error``: the file it was writing (when it names one) and its disk's room (as
    :func:`note_room` kept it, else measured now)."""
    target = written_file(error)
    have = room_then(error, target, "the write failed")
    place = f" writing {target}" + (f" ({have})" if have else "") if target else ""
    head, fix = no_room(error)
    return f"{head}{place}: {reason(error)}; {fix}, and run again"


def check_room(path: PathLike, nbytes: int, what: str, fix: str) -> None:
    """``ValueError`` naming ``what``, its size, the room on ``path``'s file system and ``fix`` when ``nbytes`` is more
    than that file system has free: asked before the first byte is written."""
    free, total, mount = room(path)
    if nbytes > free:
        raise ValueError(f"{what} needs at least {size_text(nbytes)}, more than the {size_text(free)} free of "
                         f"{size_text(total)} on {mount} (where {path} is); {fix}")


def check_not_full(path: PathLike, option: str, what: str) -> None:
    """Refuse ``option``'s ``path`` when its disk has less than :data:`FULL_BELOW` free, before a long run that would
    then not write ``what``."""
    if is_full(path):
        raise ValueError(f"{option} {path}: its disk is full ({room_text(path)}); the run would not write {what}: "
                         f"free space there, or name another {option}")
