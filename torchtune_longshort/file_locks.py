"""An exclusive flock on the file a path names: the one way the package's writers wait for each other on a file
(:func:`torchtune_longshort.output_guard.atomic_open`'s temporary file, the model cache's lock file). Standard
library only."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
from pathlib import Path
from typing import Callable, Optional, Tuple


def flock_named(path: Path, flags: int, waiting: Optional[Callable[[], None]] = None,
                make_folder: bool = False) -> Tuple[int, bool]:
    """A descriptor of ``path`` (opened with ``flags``, created where absent; with ``make_folder``, its folder made
    again where it is gone, else that is the caller's FileNotFoundError) under an exclusive flock, and whether this call
    created the file. The flock is taken on the opened file, then checked to be still the one ``path`` names: a holder
    may have renamed or removed it meanwhile (then again, on the new file), else two processes would each hold a file of
    one name. ``waiting`` is called once, before this call blocks on another holder. Where the file system has no flock
    (ENOLCK / EOPNOTSUPP), none."""
    said = False
    while True:
        try:
            fd, made = os.open(path, flags | os.O_CREAT | os.O_EXCL, 0o666), True
        except FileNotFoundError:  # the folder is gone (its maker took it back)
            if not make_folder:
                raise
            path.parent.mkdir(parents=True, exist_ok=True)
            continue
        except FileExistsError:
            try:
                fd, made = os.open(path, flags), False
            except FileNotFoundError:  # its holder removed it meanwhile; a link to nothing is no one's lock: refused
                if os.path.islink(path):  # (it was tried again and again, the command never ending)
                    raise FileExistsError(errno.EEXIST, f"{path} is a symbolic link to nothing, not a lock file of "
                                          "this command's: move it away and run again", str(path)) from None
                continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                if waiting is not None and not said:
                    waiting()
                    said = True
                with contextlib.suppress(OSError):
                    fcntl.flock(fd, fcntl.LOCK_EX)
            except OSError:  # a mount without flock
                pass
            with contextlib.suppress(FileNotFoundError):
                named, held = os.stat(path), os.fstat(fd)
                if (named.st_ino, named.st_dev) == (held.st_ino, held.st_dev):
                    return fd, made
        except BaseException:
            os.close(fd)
            raise
        os.close(fd)
