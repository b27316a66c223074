"""A ``data_files`` entry that names a folder, refused as ``datasets`` refuses it, with the glob of its files to
name instead (:func:`no_folder`; :mod:`~torchtune_longshort.data.data_files` asks it for each entry)."""

from __future__ import annotations

import itertools
import os
from collections import Counter
from pathlib import Path
from typing import Any, Optional

from torchtune_longshort.data.file_kinds import data_file_suffixes


def no_folder(entry: Any, field: str, instead: str, base: Optional[Path] = None) -> None:
    """Refuses a ``data_files`` ``entry`` that names a folder, as ``datasets``' own ``resolve_pattern`` refuses it
    (it matches files only: "Unable to find '<cwd>/d'", when the run started), where the config check's
    ``file_paths.resolve_files`` read the folder's files and passed. ``base``: the folder a relative entry is read in
    (a local source's, a builder's ``data_dir``), else the current directory. The fix names a glob of its files
    (:func:`_files_glob`) or the folder as ``instead`` says (the key it goes in, and those to leave out)."""
    where = Path(base) if base is not None else Path(os.getcwd())
    if not isinstance(entry, (str, Path)) or not (where / entry).is_dir():
        return
    from datasets.data_files import resolve_pattern  # deferred: datasets (heavy import)

    try:
        resolve_pattern(os.fspath(entry), where.as_posix())
    except FileNotFoundError:
        pattern = os.path.join(os.fspath(entry), _files_glob(where / entry))
        named = f", {os.fspath(where / entry)!r}," if base is not None else ""
        raise FileNotFoundError(f"{field}={os.fspath(entry)!r} is a folder, and datasets reads data_files as files or "
                                f"globs only (it refuses a folder: \"Unable to find\"): name its files by a glob, "
                                f"{pattern!r}, or the folder{named} as {instead}") from None


def _files_glob(folder: Path, most: int = 10_000) -> str:
    """``*.<its most common data-file suffix>`` among a folder's own files, else ``**/*.<...>`` among the first
    ``most`` below it (``/`` never walks the disk), else ``*``: the glob a refusal suggests (a tie: first by name)."""
    for glob, files in (("*", folder.iterdir()), ("**/*", itertools.islice(folder.rglob("*"), most))):
        found = Counter(f.suffix for f in files if f.suffix in data_file_suffixes() and f.is_file())
        if found:
            return glob + max(sorted(found), key=found.__getitem__)
    return "*"
