"""Whether a glob a command reads could match a file the command writes: the files of its output that the next run
would read back (:func:`glob_meets`).

Both sides are patterns: the glob as the project's readers expand it (:func:`glob_files`: ``*``, ``?``, ``[...]`` in a
name, a ``**`` name any folders, none included, as ``datasets``' ``data_files`` reads it), and what the command writes,
whose names may hold ``*`` for text not known before it runs (``results_*.json``: lm-eval's date) and a ``**`` name
for folders a component fills as it likes (a metric logger's). They meet when one path fits both.
"""

from __future__ import annotations

import fnmatch
import glob
import os
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator, List, Optional, Sequence, Tuple, Union

# How a data glob is read (glob.glob's recursive): a ``**`` name is any folders, none included (``./**/*.txt`` reads
# ``./notes.txt`` and ``./a/b/c.txt``), as ``datasets``' data_files reads it; it was one name, as ``*`` is.
RECURSIVE = True
STAR = object()  # a run of anything: ``*`` in a name, ``**`` among a path's names


def glob_files(pattern: Union[str, Path], skipped: Optional[List[Path]] = None) -> List[Path]:
    """The files a data glob ``pattern`` names, sorted, as every reader of the project expands it
    (:func:`~torchtune_longshort.data.file_paths.resolve_files`). Below the pattern's fixed head no link to a folder
    is followed, as ``datasets``' ``data_files`` and a folder walk read them (``books/*/*.txt`` leaves out
    ``books/link/c.txt``, ``books/link -> ../elsewhere``): glob.glob followed them, so two links to one folder, or a
    link beside its target, read each of its files twice, and a link loop read them over and over. A link in the
    head (``data/*.txt``, ``data -> /mnt/data``) and a link to a file are followed, as ``datasets`` follows them.
    ``skipped``, given, gets the links left out behind which a match lies (``books/link``), sorted, for the note
    that says so (:func:`~torchtune_longshort.data.file_paths.note_skipped_links`)."""
    pattern = str(Path(pattern).expanduser())
    parts = Path(pattern).parts
    head = next((k for k, part in enumerate(parts) if glob.has_magic(part)), len(parts))
    links: set = set()
    if RECURSIVE and "**" in parts:
        matches = _deep_glob(pattern, links)
    else:  # each name of a match stands for one of the pattern's: a link among its folders below the head is left
        matches = []
        for f in glob.glob(pattern):
            link = next((q for q in (os.path.join(*parts[:head], *Path(f).parts[head:k + 1])
                                     for k in range(head, len(parts) - 1)) if os.path.islink(q)), None)
            if link is None:
                matches.append(f)
            elif os.path.isfile(f):
                links.add(link)
    if skipped is not None:
        skipped += sorted(map(Path, links))
    return [Path(f) for f in sorted(matches) if Path(f).is_file()]


def _deep_glob(pattern: str, links: Optional[set] = None) -> List[str]:
    """``glob.glob(pattern, recursive=True)`` without following a link to a folder below the pattern's fixed head
    (:func:`glob_files`). The folders below the head are walked and each file's names matched against the
    pattern's, a hidden name only by a pattern name starting with a dot, as glob reads them. A folder no match can
    lie below is not walked, as glob lists none (``**/*.md`` beside a ``.venv/`` walked its 60,000 files, 11 s where
    glob took 0.06 s, and ``data*/**/*.txt`` every folder beside ``data*``). ``links``, given, gets the links to
    folders left out behind which a match lies (each probed up to its first match, its own links not followed)."""
    parts = Path(pattern).parts
    head = next(k for k, part in enumerate(parts) if glob.has_magic(part))
    base, rest = os.path.join(".", *parts[:head]), tuple(STAR if p == "**" else p for p in parts[head:])
    shown = lambda n: not (isinstance(n, str) and n.startswith("."))  # noqa: E731  (what a ** takes)
    at = lambda names: os.path.join(*parts[:head], *names) if head else os.path.join(*names)  # noqa: E731
    left: List[Tuple[str, ...]] = []
    found = [at(names) for names in _walk_matches(base, base, rest, shown, left)]
    if links is not None:
        links.update(at(names) for names in left
                     if next(_walk_matches(os.path.join(base, *names), base, rest, shown, []), None) is not None)
    return found


def _walk_matches(top: str, base: str, rest: Tuple[object, ...], shown: Callable[[object], bool],
                  left: List[Tuple[str, ...]]) -> Iterator[Tuple[str, ...]]:
    """The names (relative to ``base``) of the files under ``top`` that fit ``rest``, walked without entering a link
    to a folder (``top`` itself is entered); ``left`` gets the names of such links a match may lie below."""
    for root, dirs, files in os.walk(top):  # followlinks=False: a link to a folder is listed, never entered
        below = Path(os.path.relpath(root, base)).parts  # () at the base
        dirs[:] = [d for d in dirs if _meet(rest, (*below, d, STAR), _glob_name, shown)]  # a match may lie below
        left += [(*below, d) for d in dirs if os.path.islink(os.path.join(root, d))]
        for name in files:
            names = Path(os.path.relpath(os.path.join(root, name), base)).parts
            if _meet(rest, names, _glob_name, shown):
                yield names


def _glob_name(pattern: str, name: str) -> bool:
    return fnmatch.fnmatchcase(name, pattern) and (pattern.startswith(".") or not name.startswith("."))


def _name_tokens(name: str) -> Tuple[object, ...]:
    """``name`` of a glob as fnmatch reads it: :data:`STAR`, or a pattern of one character (``?``, ``[...]``, a
    character; a ``[`` that never closes is itself)."""
    out, i = [], 0
    while i < len(name):
        c = name[i]
        if c == "*":
            out.append(STAR)
        elif c == "[":
            j = i + 1 + (name[i + 1: i + 2] == "!")
            j += name[j: j + 1] == "]"
            close = name.find("]", j)
            if close >= 0:
                out.append(name[i: close + 1])
                i = close
            else:
                out.append(glob.escape(c))
        else:
            out.append(glob.escape(c))
        i += 1
    return tuple(out)


def _meet(p: Sequence[object], t: Sequence[object], one: Callable[[object, object], bool],
          star_takes: Callable[[object], bool] = lambda _: True) -> bool:
    """Whether some sequence fits both ``p`` and ``t``: each a list of :data:`STAR` (any run) and single items, two
    single items fitting one another when ``one(p_item, t_item)``; ``star_takes(t_item)``: whether a star of ``p``
    may take that item of ``t``."""

    @lru_cache(maxsize=None)
    def f(i: int, j: int) -> bool:
        if i == len(p) and j == len(t):
            return True
        if i < len(p) and p[i] is STAR and (f(i + 1, j) or j < len(t) and star_takes(t[j]) and f(i, j + 1)):
            return True
        if j < len(t) and t[j] is STAR and (f(i, j + 1) or i < len(p) and f(i + 1, j)):
            return True
        return (i < len(p) and j < len(t) and p[i] is not STAR and t[j] is not STAR and one(p[i], t[j])
                and f(i + 1, j + 1))

    return f(0, 0)


def _name_meets(pattern: str, written: str) -> bool:
    """Whether a name fits both the glob name ``pattern`` and ``written`` (literal but for its ``*``); a hidden
    name (a leading dot) fits only a pattern that starts with a dot, as ``glob`` reads it."""
    if written.startswith(".") and not pattern.startswith("."):
        return False
    w = tuple(STAR if c == "*" else c for c in written)
    return _meet(_name_tokens(pattern), w, lambda pc, wc: fnmatch.fnmatchcase(wc, pc))


def _names(path: str, deep: bool) -> Tuple[object, ...]:
    """``path`` absolute, the folders before its first pattern name resolved (links followed), as a list of names,
    a ``**`` name as :data:`STAR` where ``deep``."""
    parts = Path(os.path.abspath(os.path.expanduser(path))).parts
    first = next((k for k, part in enumerate(parts) if glob.has_magic(part)), len(parts))
    head = Path(os.path.realpath(Path(*parts[:first]))).parts
    return tuple(STAR if part == "**" and deep else part for part in (*head, *parts[first:]))


def glob_meets(pattern: Union[str, Path], written: Union[str, Path]) -> bool:
    """Whether the glob ``pattern`` (a data path: ``./**/*.txt``) could match a file the command writes at
    ``written`` (``out/0k/qa1.jsonl``, ``res/model/results_*.json``, ``out/logs/**/*``; a ``*`` in it any text, a
    ``**`` name any folders), both read from the working directory."""
    return _meet(_names(str(pattern), RECURSIVE), _names(str(written), True),
                 _name_meets,
                 lambda w: not (isinstance(w, str) and w.startswith(".")))
