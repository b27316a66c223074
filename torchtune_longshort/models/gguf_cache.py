"""Where converted models are cached (:func:`cache_dir`), how a refusal names a folder there (:func:`cache_field`),
and the lock every writer of a converted folder holds (:func:`lock_beside`, :func:`waited_for`): a fetch of a model
and a conversion into its folder, in this process or another (pytest workers, a second terminal).
"""

from __future__ import annotations

import contextlib
import os
import sys
from pathlib import Path
from typing import Iterator, Tuple

from torchtune_longshort.file_locks import flock_named
from torchtune_longshort.home_folder import home_folder, no_home_words


def cache_dir() -> Path:
    """Where converted models are cached: ``$LONGSHORT_CACHE`` (a ``~`` in it the home folder, as ``$HF_HOME``'s:
    ``LONGSHORT_CACHE="~/c"`` made a folder named ``~`` in the working directory), else
    ``$XDG_CACHE_HOME/torchtune_longshort`` (an absolute ``XDG_CACHE_HOME``, as the XDG spec reads it; huggingface_hub
    and torch.hub put their caches there too), else ``~/.cache/torchtune_longshort``."""
    given = os.environ.get("LONGSHORT_CACHE")
    if given:
        return Path(given).expanduser()
    xdg = os.path.expanduser(os.environ.get("XDG_CACHE_HOME") or "")
    if os.path.isabs(xdg):
        return Path(xdg) / "torchtune_longshort"
    home = home_folder()
    if home is None:  # Path.home()'s RuntimeError ended the command in a traceback
        raise ValueError(f"the model cache has no folder: {no_home_words()}; set LONGSHORT_CACHE=<folder> (or HOME, "
                         "or XDG_CACHE_HOME) to a folder you can write")
    return home / ".cache" / "torchtune_longshort"


def cache_field() -> str:
    """How a refusal names a model's folder in :func:`cache_dir`: the variable that chose the cache, and the one that
    moves it."""
    if os.environ.get("LONGSHORT_CACHE"):
        return "the model folder in LONGSHORT_CACHE"
    moves = "LONGSHORT_CACHE=<folder> moves it"
    if os.path.isabs(os.path.expanduser(os.environ.get("XDG_CACHE_HOME") or "")):
        return f"the model folder in $XDG_CACHE_HOME/torchtune_longshort ({moves})"
    home = home_folder()  # None: Path.home() raised RuntimeError (as cache_dir reads it)
    said = f"HOME={str(home)!r}" if home is not None else no_home_words()
    return f"the model folder in ~/.cache/torchtune_longshort ({said}; {moves})"


def lock_beside(out: Path) -> Path:
    """The lock file of every writer of ``out`` (``.<name>.lock`` beside it): a fetch of a model and a conversion
    into its folder."""
    return out.parent / f".{out.name}.lock"


def _held(lock: Path, doing: str) -> Tuple[int, bool]:
    """A descriptor of ``lock`` under an exclusive flock, and whether this call made the file, taken once the file
    it holds is still the one named ``lock`` (a holder that removed it meanwhile: then again, on the new file; two
    holders of one name, the old file's and a new one's, both converted). Its folder gone (a fetch that made it was
    stopped and took back the lock file and the folder while this one waited): made again, and this call fetches in
    its place (it ended in "[Errno 2] No such file or directory: '<lock>'"). One line first when another process
    holds it (a second terminal's fetch waited a minute without a word). A file system without flock: none."""
    def say() -> None:
        print(f"waiting for another process {doing} (it holds {lock})", file=sys.stderr, flush=True)

    return flock_named(lock, os.O_RDWR, say, make_folder=True)


@contextlib.contextmanager
def waited_for(lock: Path, doing: str, keep: bool = True) -> Iterator[None]:
    """``lock`` held for the block (:func:`_held`: a killed holder's flock goes with it). A lock file this call
    made is removed, while held, when the block fails, or always unless ``keep``."""
    (fd, made), done = _held(lock, doing), False
    try:
        yield
        done = True
    finally:
        try:
            if made and not (done and keep):
                lock.unlink(missing_ok=True)
        finally:
            os.close(fd)
