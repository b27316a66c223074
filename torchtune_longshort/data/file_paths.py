"""Which files a data path names: a file, a folder (its files of the reader's suffixes, recursively, hidden ones left
out as ``datasets`` leaves them) or a glob, or a list of them (:func:`resolve_files`), and the warning that names a
folder's files a reader leaves out by their suffix (:func:`warn_left_out`). Standard library only: the evaluation
task pack resolves its local data with it at import time."""

from __future__ import annotations

import glob
import hashlib
import logging
import os
import stat
from pathlib import Path
from typing import Any, List, Optional, Sequence, Union

from torchtune_longshort.config.glob_match import glob_files
from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.plural import counted

log = logging.getLogger(__name__)


class NoFileToRead(FileNotFoundError):
    """A folder's entry of a read suffix that is no file to read (:func:`resolve_files`): its message says the fix."""


def resolve_files(entries: Union[str, Path, Sequence[Union[str, Path]]], suffixes: Sequence[str],
                  setting: str, left_out: Optional[List[Path]] = None,
                  hidden: Optional[List[Path]] = None) -> List[Path]:
    """The files named by ``entries``: a path or a glob, or a list of them. A folder stands for its files ending in
    one of ``suffixes`` (recursively, sorted), hidden ones left out as ``datasets`` leaves them (a Jupyter
    ``.ipynb_checkpoints/`` copy of a file was read as a second document; :func:`in_hidden`); a glob for its matches
    (sorted). ``setting`` names the option in messages. ``left_out``, given, gets the folders' other (not hidden)
    files, sorted, from the same walk; ``hidden``, given, the hidden files it leaves out that end in one of
    ``suffixes`` (versions before 2026-12-05 read them). Raises ``FileNotFoundError`` for an entry that names
    nothing, for a folder without such files, and for a folder's entry of such a suffix that is no file to read (a
    link to nothing, a FIFO: left out without a word before, never opened, so a FIFO cannot block)."""
    entries = [entries] if isinstance(entries, (str, Path)) else list(entries)
    files: List[Path] = []
    for entry in entries:
        p = Path(entry).expanduser()
        links: List[Path] = []  # links to folders left out, behind which a file to read lies
        if p.is_dir():
            names = sorted(p.rglob("*"))
            links = [f for f in names if f.is_symlink() and f.is_dir() and not in_hidden(f, p) and _holds(f, suffixes)]
            walked = [f for f in names if f.is_file()]
            unread = [f for f in names if f.suffix in suffixes and not (f.is_file() or f.is_dir() or in_hidden(f, p))]
            if unread:  # were left out without a word: a corpus read fewer files than the folder names
                more = f" (and {len(unread) - 1} more such)" if len(unread) > 1 else ""
                raise NoFileToRead(f"{setting}={str(entry)!r}: {unread[0]} is {no_file(unread[0])}{more}, no file "
                                        "to read: remove it from the folder (or put back what it stands for)")
            if hidden is not None:
                hidden += [f for f in walked if f.suffix in suffixes and in_hidden(f, p)]
            walked = [f for f in walked if not in_hidden(f, p)]
            found = [f for f in walked if f.suffix in suffixes]
            if left_out is not None:
                left_out += [f for f in walked if f.suffix not in suffixes]
            if not found:
                raise FileNotFoundError(f"{setting}={str(entry)!r} holds no files ending in {list(suffixes)}"
                                        f"{skipped_links(entry, links, refused=True)}")
        elif p.is_file():
            found = [p]
        else:
            found = glob_files(p, links)
            if not found:
                raise FileNotFoundError(f"{setting}={str(entry)!r} does not exist (no such file, folder or glob match)"
                                        f"{skipped_links(entry, links, refused=True)}")
        note_skipped_links(setting, entry, links)
        files.extend(found)
    return files


def in_split(files: List[Path], folder: Path, split: Any) -> List[Path]:
    """Of ``files`` (a local folder source's, :func:`resolve_files`), those ``datasets`` reads as ``split``
    (``train``, ``train[:10%]``, ``train+test``) where the names in ``folder`` tell splits apart (``train.jsonl``
    beside ``test.jsonl``, as ``datasets.data_files.get_data_patterns`` infers them); all of them otherwise."""
    from datasets.data_files import DataFilesDict, get_data_patterns  # deferred: datasets (heavy import)

    try:
        found = DataFilesDict.from_patterns(get_data_patterns(str(folder)), base_path=str(folder))
    except (OSError, ValueError):  # no file datasets reads (EmptyDatasetError): the load says it in its words
        return files
    names = [str(s).split("[")[0].strip() for s in str(split or "train").split("+")]
    if set(found) == {"train"} or not all(n in found for n in names):  # no split in the names, or none that is
        return files
    read = {Path(f).resolve() for n in names for f in found[n]}
    return [f for f in files if f.resolve() in read]


def _holds(folder: Path, suffixes: Sequence[str]) -> bool:
    """Whether ``folder`` (a link to one, entered) holds a file ending in one of ``suffixes``, not hidden, as a
    folder path reads it (links below it not entered); the walk stops at the first."""
    for root, dirs, files in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        if any(Path(f).suffix in suffixes and not f.startswith(".") and os.path.isfile(os.path.join(root, f))
               for f in files):
            return True
    return False


def skipped_links(entry: Union[str, Path], links: Sequence[Path], refused: bool = False) -> str:
    """The words for ``links`` to folders that a data path ``entry`` leaves out (:func:`resolve_files`): how many,
    the first and where it leads, and the path that reads it (the link named in the path's fixed part, which is
    followed); "" when there are none. ``refused``: for a refusal that found no file (its files lie behind them)."""
    if not links:
        return ""
    first, parts = links[0], Path(entry).expanduser().parts
    deep = next((k for k, part in enumerate(parts) if part == "**"), len(parts))
    rest = parts[min(len(first.parts), deep):] if glob.has_magic(str(entry)) else ()
    fix = str(Path(first, *rest))
    said = (f"{counted(len(links), 'link')} to folders below its fixed part, not followed (as datasets' data_files "
            f"follows none; first: {first} -> {os.readlink(first)})")
    if refused:
        return f"; what it names lies behind {said}: name the link itself, {fix!r}"
    return f"{said}: their files are not read; to read them, name the link itself, {fix!r}"


_told: set = set()  # (setting, entry) whose skipped links were noted in this process


def note_skipped_links(setting: str, entry: Union[str, Path], links: Sequence[Path]) -> None:
    """One warning, once per data path in a process and on its first rank, naming the ``links`` to folders it left
    out (:func:`skipped_links`): a corpus linked into a data folder (``data/pg19 -> /mnt/big/pg19``) was read
    without it, and without a word."""
    key = (setting, str(entry))
    if links and key not in _told and launched_rank() == 0:
        _told.add(key)
        log.warning("%s=%r: %s", setting, str(entry), skipped_links(entry, links))


def no_file(f: Path) -> str:
    """What the entry ``f``, which is no file to read (nor a folder), is: a link to nothing, a FIFO, a socket, a
    device."""
    mode = f.lstat().st_mode
    if stat.S_ISLNK(mode):
        return f"a symbolic link to {os.readlink(f)}, which is no file (missing, or itself no regular file)"
    kinds = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a device"),
             (stat.S_ISBLK, "a device"))
    return next((what for test, what in kinds if test(mode)), "not a regular file")


def in_hidden(f: Path, folder: Path) -> bool:
    """Whether ``f`` is hidden under ``folder``: its name or a folder between them starts with a dot (``.DS_Store``,
    ``.git/``, ``.ipynb_checkpoints/``)."""
    return any(part.startswith(".") for part in f.relative_to(folder).parts)


def warn_left_out(path: Union[str, Sequence[str]], suffixes: Sequence[str], left: Sequence[Path],
                  names: Any, key: str = "path", way: Optional[str] = None) -> None:
    """Warn of the files ``left`` that a folder in ``path`` holds and :func:`~.corpus.local_text` does not read (their
    suffix is none of ``suffixes``: a book saved without one, a ``.text`` file; :func:`resolve_files` finds them),
    naming the key that takes them: they were left out without a word. Hidden files and folders (``.DS_Store``,
    ``.git/``) are not among them. ``names``: the source's :class:`~.source_names.SourceNames`; ``key``: its
    argument that names the folder; ``way``: what to do, after a "; " (local_text's ``suffixes`` by default)."""
    if left and launched_rank() == 0:  # every process of a launch reads the source: said once
        one = len(left) == 1  # "1 file in it is not read, its suffix not one of ...; add it to ... to read it"
        if way is None:
            named = not names.flags or "suffixes" in names.flags  # a command line without the option: no key to name
            way = (f"add {'it' if one else 'theirs'} to {names('suffixes')} to read {'it' if one else 'them'}"
                   if named else "")
        log.warning("%s=%r: %s in it %s not read, %s suffix not one of %s (first: %s)%s", names(key), path,
                    counted(len(left), "file"), "is" if one else "are", "its" if one else "their", list(suffixes),
                    left[0], f"; {way}" if way else "")


DIGEST_BYTES = 8  # of each file's digest (file_digests)
DIGEST_HEAD = 1 << 20  # the bytes of each file that its digest reads


def file_digests(files: Sequence[Union[str, Path]]) -> bytes:
    """For each of ``files`` in order, :data:`DIGEST_BYTES` bytes of a hash of its size and its first MiB: a cheap
    fingerprint of a corpus (an edit past the first MiB that keeps the size is not seen), compared on resume."""
    out = bytearray()
    for path in files:
        with open(path, "rb") as f:
            h = hashlib.blake2b(f.read(DIGEST_HEAD), digest_size=DIGEST_BYTES)
            h.update(str(f.seek(0, 2)).encode())  # its size
        out += h.digest()
    return bytes(out)
