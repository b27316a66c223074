"""The folders a command makes and takes back: the parents it made on the way to an output folder
(:func:`missing_root`, :func:`remove_made_folders`: a refused or failed command leaves no empty folder of its own),
and its scratch folders beside a target (:func:`folder_beside`, renamed into place when done; those a killed
process left removed by :func:`remove_abandoned`). Never a folder of the user's.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Optional, Union

from torchtune_longshort.plural import counted
from torchtune_longshort.temporary_files import ABANDONED_AFTER_S
from torchtune_longshort.umask import current_umask


def missing_root(path: Union[str, Path]) -> Optional[Path]:
    """The outermost of ``path`` and its parents that does not exist (absolute), which ``mkdir(parents=True)`` would
    create; None when ``path`` exists. A command refused after making ``path`` takes back that far
    (:func:`remove_made_folders`)."""
    path, root = Path(os.path.abspath(Path(path).expanduser())), None
    while not path.exists() and path != path.parent:
        root, path = path, path.parent
    return root


def remove_made_folders(path: Union[str, Path], root: Optional[Path]) -> None:
    """Remove ``path`` and its parents up to ``root`` (:func:`missing_root` before they were made) while each is an
    empty folder: a refused command leaves no empty folders it made; nothing when ``root`` is None."""
    if root is None:
        return
    path = Path(os.path.abspath(Path(path).expanduser()))
    for p in [path, *path.parents]:
        if p != root and root not in p.parents:
            return
        try:
            if p.exists():
                p.rmdir()
        except OSError:
            return  # not empty, or not a folder: what holds files stays
        if p == root:
            return


def folder_beside(target: Union[str, Path], tag: str, abandoned_after_s: float = ABANDONED_AFTER_S) -> Path:
    """A new, empty folder of this call's own beside ``target`` (``.<name>.<tag>_<random>``: on the same filesystem,
    so a rename moves it into place, and never a folder of the user's), with the mode a plain ``mkdir`` gives
    (``tempfile.mkdtemp``'s 0700 would hide a shared cache or tokenizer from other users). Such folders of
    ``target`` and ``tag`` untouched for ``abandoned_after_s`` (:data:`ABANDONED_AFTER_S`; 0 for a caller holding
    a lock that every maker of such folders holds: any other is a killed holder's), which a killed process left (a
    SIGKILL during a GGUF conversion left 540 MB in the cache, hidden), are removed first, with one line."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    remove_abandoned(target, tag, abandoned_after_s)
    folder = Path(tempfile.mkdtemp(prefix=f".{target.name}.{tag}_", dir=target.parent))
    mask = current_umask()
    os.chmod(folder, 0o777 & ~mask)
    return folder


def remove_abandoned(target: Path, tag: str, abandoned_after_s: float) -> None:
    """:func:`folder_beside`'s folders of ``target`` and ``tag`` untouched for ``abandoned_after_s``, removed, with
    one line naming them."""
    abandoned = [p for p in target.parent.glob(f".{target.name}.{tag}_*")
                 if p.is_dir() and not p.is_symlink() and time.time() - p.stat().st_mtime >= abandoned_after_s]
    for p in abandoned:
        shutil.rmtree(p, ignore_errors=True)
    if abandoned:
        print(f"removed {counted(len(abandoned), 'temporary folder')} a killed process left beside {target} "
              f"({', '.join(p.name for p in abandoned)})", file=sys.stderr)


def named_in_place(error: BaseException, aside: Path, target: Path) -> BaseException:
    """``error`` as the user can follow it: an ``OSError`` writing a file in ``aside`` (:func:`folder_beside`'s,
    gone once the command ends) raised again naming that file under ``target``, where it would have been (a full
    disk: "writing out/tokenizer.json", not "writing .out.peft_base_x/tokenizer.json"); any other error as it is."""
    written = (error.filename2 or error.filename) if isinstance(error, OSError) else None
    try:
        rel = Path(os.fspath(written)).relative_to(aside) if written else None
    except (TypeError, ValueError):  # bytes, or a file outside the folder aside
        rel = None
    if rel is None:
        return error
    renamed = OSError(error.errno, error.strerror, str(target / rel))
    renamed.__cause__ = error
    return renamed
