"""The Python standard library's own source files as an offline long-text corpus.

Every machine that runs this project has them (about 700+ files and dozens over 40 KB), so they are the
embedded default corpus for tokenizer training, tiny pre-training runs and long-context perplexity when no
Hugging Face data set can be downloaded.
"""

from __future__ import annotations

import functools
import hashlib
import sysconfig
from pathlib import Path
from typing import Any, Dict, Iterator, List, Optional, Union


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


def stdlib_source_files(
    min_bytes: int = 0, include_tests: Union[bool, str] = True, limit: Optional[int] = None
) -> List[Path]:
    """Sorted list of the standard library's ``*.py`` files.

    Args:
        min_bytes: keep only files of at least this many bytes (e.g. 40_000 for long documents).
        include_tests: ``True`` keeps the ``test/`` package (the bulk of the text; absent on some installs),
            ``False`` leaves out ``TEST_PACKAGES``, ``"only"`` keeps just them (text held out from a training
            corpus read with ``False``).
        limit: keep only the first ``limit`` files after sorting (deterministic subsets for tests).

    Returns:
        Paths, sorted, never including ``site-packages``. Raises ``FileNotFoundError`` when none match.
    """
    if include_tests not in (True, False, "only"):
        raise ValueError(f"include_tests={include_tests!r}: accepted True, False or 'only'")
    global _used
    _used = True  # results computed in this process then carry the corpus's content hash (provenance)
    root = stdlib_dir()
    files = []
    for f in sorted(root.rglob("*.py")):
        rel = f.relative_to(root).parts
        if "site-packages" in rel or "dist-packages" in rel:
            continue
        in_tests = rel[0] in TEST_PACKAGES and len(rel) > 1
        if (include_tests == "only" and not in_tests) or (not include_tests and in_tests):
            continue
        if f.stat().st_size >= min_bytes:
            files.append(f)
    if limit is not None:
        files = files[:limit]
    if not files:
        raise FileNotFoundError(
            f"no standard-library source files of >= {min_bytes} bytes under {root}"
        )
    return files


def iter_stdlib_documents(
    min_bytes: int = 0, include_tests: Union[bool, str] = True, limit: Optional[int] = None
) -> Iterator[str]:
    """Yield the text of each standard-library source file (see :func:`stdlib_source_files`)."""
    for f in stdlib_source_files(min_bytes=min_bytes, include_tests=include_tests, limit=limit):
        yield f.read_text(encoding="utf-8", errors="replace")


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
