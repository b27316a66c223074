"""The Python standard library's own source files as an offline long-text corpus.

Every machine that runs this project has them (about 700+ files and dozens over 40 KB), so they are the
embedded default corpus for tokenizer training, tiny pre-training runs and long-context perplexity when no
Hugging Face data set can be downloaded.
"""

from __future__ import annotations

import functools
import hashlib
import os
import sysconfig
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Tuple, Union

# The stdlib's named parts -> corpus.stdlib()'s arguments: the eval tasks' ppl_source / mis_source and
# longshort-misalignment's --data take these names.
STDLIB_SOURCES: Dict[str, Dict[str, Any]] = {
    "stdlib": {"include_tests": True},
    "stdlib_tests": {"include_tests": "only"},  # test packages: held out from a corpus read with include_tests False
    "stdlib_heldout": {"split": "heldout"},  # held out from a corpus read with split "train", on every install
}


_used = False


def was_used() -> bool:
    """Whether this process listed the corpus's files (its :func:`content_hash` then goes into the provenance)."""
    return _used


def stdlib_dir() -> Path:
    """Directory of the running interpreter's standard library (``sysconfig``'s ``stdlib`` path)."""
    return Path(sysconfig.get_paths()["stdlib"])


# Top-level packages that ``include_tests=False`` leaves out and ``include_tests="only"`` keeps: the held-out
# complement of a training corpus read with ``include_tests=False``.
TEST_PACKAGES = ("test", "idlelib", "lib2to3")

# The corpus split in two by file (``split="train"`` / ``"heldout"``), for installs whose test packages are too small to
# evaluate on (Debian and Ubuntu ship ``test`` in a separate package, ``idlelib`` and ``lib2to3`` too): the held-out
# part is the test packages plus one file in HELDOUT_EVERY of the others, picked by a hash of the file's path
# relative to the stdlib, so that a file is on the same side on every install and Python version that has it.
HELDOUT_EVERY = 3
SPLITS = ("train", "heldout")
# The arguments that select which files a stdlib source reads (check_stdlib_arguments checks them): a run's
# recorded dataset and an eval source are compared by them (data.stdlib_overlap).
SELECTION_KEYS = ("include_tests", "split", "limit", "min_bytes")


def in_heldout(relative: str) -> bool:
    """Whether the stdlib file at ``relative`` (a POSIX path under the stdlib folder, ``"json/decoder.py"``) is in
    the ``heldout`` split: a file of :data:`TEST_PACKAGES`, or one whose path hash falls in 1 of
    :data:`HELDOUT_EVERY`."""
    parts = relative.split("/")
    if parts[0] in TEST_PACKAGES and len(parts) > 1:
        return True
    return int.from_bytes(hashlib.sha256(relative.encode()).digest()[:8], "little") % HELDOUT_EVERY == 0


@functools.lru_cache(maxsize=4)
def _listing(root: str) -> Tuple[Tuple[Path, Tuple[str, ...], int], ...]:
    """Every ``*.py`` file under the stdlib folder ``root`` outside ``site-packages``, sorted as paths sort (by
    their parts): ``(path, its parts relative to root, bytes)``. Listed once per process, by ``os.walk`` with
    ``site-packages`` / ``dist-packages`` pruned (``Path.rglob`` walked into them: 2.2 of a tiny run's 7.5 s)."""
    out = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if d not in ("site-packages", "dist-packages")]
        rel_folder = os.path.relpath(folder, root)
        base = () if rel_folder == "." else tuple(rel_folder.split(os.sep))
        for name in names:
            if name.endswith(".py"):
                path = os.path.join(folder, name)
                out.append((base + (name,), path, os.stat(path).st_size))
    out.sort(key=lambda r: r[0])
    return tuple((Path(path), rel, size) for rel, path, size in out)


def check_stdlib_arguments(include_tests: Any = True, split: Any = None, limit: Any = None, where: str = "",
                           min_bytes: Any = 0) -> None:
    """``ValueError`` for a choice :func:`stdlib_source_files` does not take, naming ``<where>.<argument>`` (the
    recipe's config check asks this before anything is built; a negative ``limit`` was a slice from the end, a null
    ``min_bytes`` a TypeError traceback once the run had loaded the model)."""
    at = f"{where}." if where else ""
    if isinstance(min_bytes, bool) or not isinstance(min_bytes, int) or min_bytes < 0:  # -1 read as 0, unsaid
        raise ValueError(f"{at}min_bytes={min_bytes!r} is not accepted: expected an integer >= 0 (the smallest file "
                         "kept, in bytes; 0 keeps every file)")
    if include_tests not in (True, False, "only"):
        raise ValueError(f"{at}include_tests={include_tests!r}: accepted True, False or 'only'")
    if split not in (None, *SPLITS):
        raise ValueError(f"{at}split={split!r}: accepted None (the whole corpus), {', '.join(map(repr, SPLITS))}")
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise ValueError(f"{at}limit={limit!r} is not accepted: expected an integer >= 1 (the first files), or null")


def stdlib_source_files(
    min_bytes: int = 0, include_tests: Union[bool, str] = True, limit: Optional[int] = None,
    split: Optional[str] = None,
) -> List[Path]:
    """Sorted list of the standard library's ``*.py`` files.

    Args:
        min_bytes: keep only files of at least this many bytes (e.g. 40_000 for long documents).
        include_tests: ``True`` keeps the ``test/`` package (the bulk of the text; absent on some installs),
            ``False`` leaves out ``TEST_PACKAGES``, ``"only"`` keeps just them (text held out from a training
            corpus read with ``False``).
        limit: keep only the first ``limit`` files after sorting (deterministic subsets for tests).
        split: ``None`` (no split), ``"train"`` or ``"heldout"`` (:func:`in_heldout`): the two disjoint parts of
            the corpus, a training corpus and the text it never sees on any install. Both filters apply
            (``include_tests=False, split="train"`` is the train split, which holds no test package anyway).

    Returns:
        Paths, sorted, never including ``site-packages``. Raises ``FileNotFoundError`` when none match.
    """
    check_stdlib_arguments(include_tests=include_tests, split=split, limit=limit, min_bytes=min_bytes)
    global _used
    _used = True  # results computed in this process then carry the corpus's content hash (provenance)
    root = stdlib_dir()
    files = []
    for f, rel, size in _listing(str(root)):
        in_tests = rel[0] in TEST_PACKAGES and len(rel) > 1
        if (include_tests == "only" and not in_tests) or (not include_tests and in_tests):
            continue
        if split is not None and in_heldout("/".join(rel)) != (split == "heldout"):
            continue
        if size >= min_bytes:
            files.append(f)
    if limit is not None:
        files = files[:limit]
    if not files:
        raise FileNotFoundError(
            f"no standard-library source files of >= {min_bytes} bytes under {root} (include_tests={include_tests!r}, "
            f"split={split!r})"
        )
    return files


def iter_stdlib_documents(
    min_bytes: int = 0, include_tests: Union[bool, str] = True, limit: Optional[int] = None,
    split: Optional[str] = None,
) -> Iterator[str]:
    """Yield the text of each standard-library source file (see :func:`stdlib_source_files`)."""
    for f in stdlib_source_files(min_bytes=min_bytes, include_tests=include_tests, limit=limit, split=split):
        yield stdlib_document(f)


def stdlib_document(path: Path) -> str:
    """The document one standard-library source file is (its text; undecodable bytes replaced)."""
    return path.read_text(encoding="utf-8", errors="replace")


@functools.lru_cache(maxsize=1)
def content_hash() -> Dict[str, Any]:
    """SHA-256 over every file of the stdlib corpus (relative path, size and bytes, in sorted order)."""
    root = stdlib_dir()
    h, total = hashlib.sha256(), 0
    files = stdlib_source_files()
    for f in files:
        data = f.read_bytes()
        total += len(data)
        h.update(f.relative_to(root).as_posix().encode() + b"\0" + len(data).to_bytes(8, "little") + data)
    return {"sha256": h.hexdigest(), "files": len(files), "bytes": total, "root": str(root)}
