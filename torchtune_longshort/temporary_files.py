"""The temporary files :func:`torchtune_longshort.output_guard.atomic_open` writes through: new ones of its own,
``.<name>.<random>.tmp`` beside ``<name>``, never a file of the user's; and the removal of those a killed writer left
(:func:`remove_abandoned_temporaries`)."""

from __future__ import annotations

import errno
import glob
import os
import re
import secrets
import stat
import sys
import time
from pathlib import Path
from typing import IO, Any, Callable, Optional, Tuple

from torchtune_longshort.plural import counted


# :func:`new_temporary`'s names: ``.<name>.<8 hex digits>.tmp`` beside ``<name>``
TEMPORARY = re.compile(r"^\.(?P<name>.+)\.[0-9a-f]{8}\.tmp$")
# a temporary file or folder untouched this long was left by a killed process (a tokenizer trains in seconds, a GGUF
# converts in a minute, a report is written in seconds; each write renews its mtime)
ABANDONED_AFTER_S = 24 * 3600


def temporary_of(name: str) -> Optional[str]:
    """The name of the file a :func:`new_temporary` file ``name`` was being written for (``.run.yaml.
    1a2b3c4d.tmp`` -> ``run.yaml``: one a killed writer left), else None."""
    m = TEMPORARY.match(name)
    return m["name"] if m else None


def new_temporary(path: Path, mode: str, _claim: Optional[Callable[[Path], None]] = None,
                  **kwargs: Any) -> Tuple[Path, IO]:
    """A temporary file beside ``path`` that this call made (``O_CREAT | O_EXCL``: a name taken, by a file or a
    link of anyone's, is never opened; another is drawn), with the mode a plain ``open`` gives a new file (``0o666``
    under the umask; ``tempfile.mkstemp``'s 0600 would hide a shared report from other users), opened with ``mode``.
    ``_claim``: called with its name once made (a record of what a run wrote); a failure there removes it."""
    for _ in range(100):
        tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}.tmp")
        try:
            fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except FileExistsError:
            continue
        try:
            if _claim:
                _claim(tmp)
            return tmp, os.fdopen(fd, mode, **kwargs)
        except BaseException:
            os.close(fd)
            tmp.unlink()
            raise
    raise FileExistsError(errno.EEXIST, f"no free temporary name beside {path} in 100 tries", str(path))


def remove_abandoned_temporaries(path: Path, abandoned_after_s: float = ABANDONED_AFTER_S, say: bool = True) -> list:
    """:func:`new_temporary`'s files of ``path`` that a killed writer left (``.<name>.<8 hex>.tmp`` beside it, a
    plain file of this user's with one link, untouched for ``abandoned_after_s``: a live writer's is newer), removed
    once a later write of ``path`` is in place, with one line naming them (``say``); any other file (a link, another
    user's, another name) stays, and one that cannot be removed is left. Returns the names removed."""
    try:
        found = list(path.parent.glob(f".{glob.escape(path.name)}.*.tmp"))
    except OSError:  # a folder that cannot be listed: nothing is removed
        return []
    removed = []
    for tmp in found:
        try:
            st = tmp.lstat()
            if (temporary_of(tmp.name) == path.name and stat.S_ISREG(st.st_mode) and st.st_nlink == 1
                    and st.st_uid == os.getuid() and time.time() - st.st_mtime >= abandoned_after_s):
                tmp.unlink()
                removed.append(tmp.name)
        except OSError:
            continue
    if removed and say:
        print(f"removed {counted(len(removed), 'temporary file')} a killed process left beside {path} "
              f"({', '.join(removed)})", file=sys.stderr)
    return removed

