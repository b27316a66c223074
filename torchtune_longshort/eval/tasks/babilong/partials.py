"""The rows a BABILong generator killed part-way (SIGKILL, the out-of-memory killer) left half written: its hidden
``<out>/<length>/.<qa>.jsonl.partial`` (megabytes), removed by the next run into the same ``--out``
(:func:`remove_killed_partials`). Standard library only."""

from __future__ import annotations

import contextlib
import fcntl
import os
import stat
import sys
from pathlib import Path
from typing import List, Sequence

from torchtune_longshort.plural import counted


def partial_of(path: Path) -> Path:
    """The file the generator writes ``path`` (``<length>/<qa>.jsonl``) through, moved into place once whole."""
    return path.with_name(f".{path.name}.partial")


def remove_killed_partials(out: Path, lengths: Sequence[str], qa_tasks: Sequence[str], listed: Path) -> List[str]:
    """Remove the partial files (:func:`partial_of`) of every ``<length>/<qa>.jsonl`` of ``lengths`` x ``qa_tasks`` in
    ``out`` that a killed run left, and say so in one line on stderr; the names removed, relative to ``out``. Only
    where ``listed`` (the generator's list of what it wrote there, made before its first partial file) is a file:
    another folder's ``.qa1.jsonl.partial`` is not the generator's. Only a plain file of this user's with one link
    (never a link, nor a length folder that is a link), and only when no live writer holds its flock (a generator
    writing it now; a killed one's flock went with it)."""
    if not os.path.isfile(listed):
        return []
    removed = []
    for length in lengths:
        if not stat.S_ISDIR(_lmode(out / length)):
            continue
        for qa in qa_tasks:
            part = partial_of(out / length / f"{qa}.jsonl")
            if _remove_unheld(part):
                removed.append(f"{length}/{part.name}")
    if removed:
        print(f"babilong generator: removed {counted(len(removed), 'partial file')} a killed run of the generator left "
              f"in {str(out)!r} ({', '.join(removed)})", file=sys.stderr)
    return removed


def _lmode(path: Path) -> int:
    try:
        return os.lstat(path).st_mode
    except OSError:
        return 0


def _remove_unheld(part: Path) -> bool:
    try:
        fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:  # none, or a link
        return False
    try:
        st = os.fstat(fd)
        if not (stat.S_ISREG(st.st_mode) and st.st_nlink == 1 and st.st_uid == os.getuid()):
            return False
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # a live writer's
            return False
        except OSError:  # a mount without flock: no way to tell a live writer's
            return False
        with contextlib.suppress(OSError):
            if os.path.samestat(os.lstat(part), st):
                os.unlink(part)
                return True
        return False
    finally:
        os.close(fd)
