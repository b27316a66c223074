"""What kind of file a reader of local text was given: by its name (the record formats, :func:`record_suffixes`) and
by its first bytes (:func:`not_text`: compressed, Parquet under another name, UTF-16, binary), with the words a
record that does not decode is named in. :mod:`~torchtune_longshort.data.text_files` reads the files.
"""

from __future__ import annotations

import codecs
import functools
import json
from pathlib import Path
from typing import Dict, Optional, Tuple, Union

JSON_LINES_SUFFIX = ".jsonl"
JSON_SUFFIX = ".json"
PARQUET_SUFFIX = ".parquet"
# The packaged builders of ``datasets`` whose local data files this package reads (:func:`data_file_suffixes`).
DATA_FILE_BUILDERS = ("text", "json", "csv", "parquet", "arrow")
# How much of each file a config check decodes before the run (:func:`check_heads`): a file named by mistake (gzip,
# UTF-16, binary) fails in its first bytes; reading whole corpora is the run's start, not the check's.
HEAD_BYTES = 1 << 16


@functools.lru_cache(maxsize=None)
def _builders() -> Dict[str, str]:
    """``{suffix: builder}`` as the installed ``datasets`` maps a data file's suffix to its packaged builder (its
    ``_EXTENSION_TO_MODULE``: ``.tsv`` to ``csv``, ``.ndjson`` to ``json``, ``.geoparquet`` to ``parquet`` ...).
    Asked on first use, not at import: the import of ``datasets`` takes a second."""
    from datasets.packaged_modules import _EXTENSION_TO_MODULE  # deferred: datasets (heavy import)

    return {s: builder for s, (builder, _) in _EXTENSION_TO_MODULE.items()}


def data_file_suffixes() -> Tuple[str, ...]:
    """The suffixes of the data files ``datasets`` reads from a local folder with :data:`DATA_FILE_BUILDERS`, as the
    installed ``datasets`` maps them (:func:`_builders`): a folder holding none is refused."""
    return tuple(s for s, builder in _builders().items() if builder in DATA_FILE_BUILDERS)


def record_suffixes() -> Tuple[str, ...]:
    """The suffixes of the files with records (not one whole-file document), which a folder given to a reader
    includes whatever its suffixes: those ``datasets`` reads with its ``json`` builder (``.jsonl``, ``.json``,
    ``.ndjson``: :func:`json_lines_file`) or its ``parquet`` builder (``.parquet``, ``.geoparquet``, ``.gpq``:
    :func:`parquet_file`)."""
    records = [s for s, builder in _builders().items() if builder in ("json", "parquet")]
    return tuple(dict.fromkeys((JSON_LINES_SUFFIX, JSON_SUFFIX, *records, PARQUET_SUFFIX)))


def parquet_suffixes() -> Tuple[str, ...]:
    """The suffixes ``datasets`` reads with its ``parquet`` builder (``.parquet``, ``.geoparquet``, ``.gpq``:
    :func:`_builders`), which every reader reads by rows (:func:`parquet_file`)."""
    return tuple(dict.fromkeys((PARQUET_SUFFIX, *(s for s, builder in _builders().items() if builder == "parquet"))))


def parquet_file(path: Union[str, Path]) -> bool:
    """Whether the reader reads ``path`` as Parquet, one record a row: a suffix ``datasets`` reads with its
    ``parquet`` builder (``.parquet``, ``.geoparquet``, ``.gpq``: :func:`_builders`). ``.parquet``, ``.jsonl`` and
    ``.json`` are answered without importing ``datasets``."""
    suffix = Path(path).suffix
    if suffix in (PARQUET_SUFFIX, JSON_LINES_SUFFIX, JSON_SUFFIX):
        return suffix == PARQUET_SUFFIX
    return _builders().get(suffix) == "parquet"


def json_lines_file(path: Union[str, Path]) -> bool:
    """Whether the reader reads ``path`` as JSON lines, one record a line: a suffix ``datasets`` reads with its
    ``json`` builder (``.jsonl``, ``.ndjson``: :func:`_builders`), other than ``.json`` (an array, or JSON lines:
    :func:`holds_json_lines`). ``.jsonl``, ``.json`` and ``.parquet`` are answered without importing ``datasets``."""
    suffix = Path(path).suffix
    if suffix in (JSON_LINES_SUFFIX, JSON_SUFFIX, PARQUET_SUFFIX):
        return suffix == JSON_LINES_SUFFIX
    return _builders().get(suffix) == "json"


def row_of(path: Union[str, Path], index: int) -> str:
    """How every reader names the ``index``-th row of a JSON array or a Parquet file: ``"<path> row <index>"``,
    counted from 0 as Python indexes the rows (``json.load(f)[index]``, pyarrow's ``table.slice(index, 1)``,
    pandas' ``iloc``); a JSON line is named ``<path>:<line>`` instead (:func:`line_of`)."""
    return f"{path} row {index}"


def holds_json_lines(text: str, error: json.JSONDecodeError) -> bool:
    """Whether a ``*.json`` file's ``text``, which ``json.loads`` refused with ``error``, holds JSON lines (what
    ``datasets``' ``Dataset.to_json`` writes by default, and its ``json`` loader reads): its records are then named
    ``<file>:<line>`` as in a ``*.jsonl`` file."""
    return error.msg == "Extra data" and text.lstrip().startswith("{")


def line_of(path: Union[str, Path], line: int) -> str:
    """How every reader names line ``line`` (counted from 1, as an editor counts lines) of a JSON-lines file:
    ``"<path>:<line>"``, the form of a compiler's or grep's message that editors and terminals open at the line."""
    return f"{path}:{line}"


# The words of a record whose bytes do not decode, and of a compressed file (a recipe's message adds its way on:
# ``source_names.mend_or_skip``).
NOT_DECODED = "bytes that are not"
COMPRESSED = "-compressed file, not text"
# A Parquet file under another suffix: a whole file of records, which renaming reads and no skipping helps
MISNAMED_PARQUET = "a Parquet file, not text"
_ZIP, _ARROW = "a zip archive", "an Arrow file"
# A whole file of another kind, whose own way on (rename, extract, load as a data set) reads it: skipping a bad record
# would drop the whole file, so no message tells to skip it (``source_names.mend_or_skip``)
WRONG_KIND = (MISNAMED_PARQUET, f"{_ZIP}, not text", f"{_ARROW}, not text")


def whole_file(said: str) -> bool:
    """Whether a reader's message ``said`` refuses a whole file of another kind (:data:`WRONG_KIND`, or a compressed
    file): skipping such records drops the whole file, so the way on is the message's own fix alone."""
    return COMPRESSED in said or any(kind in said for kind in WRONG_KIND)


def _decompress() -> str:
    return f"decompress it first (the reader takes text files, and records in {', '.join(record_suffixes())} files)"


def _name_parquet() -> str:
    return f"name it {' or '.join(f'*{s}' for s in parquet_suffixes())}, whose rows are read as records"


# What a file is by its first bytes, when it is no text: (magic, what it is, what to do). Each fix that names
# suffixes is asked of datasets (record_suffixes, parquet_suffixes) when such a file is met.
_MAGIC = (
    (b"PAR1", MISNAMED_PARQUET[:-len(", not text")], _name_parquet),
    (b"\x1f\x8b", "a gzip-compressed file", _decompress),
    (b"BZh", "a bzip2-compressed file", _decompress),
    (b"\xfd7zXZ\x00", "an xz-compressed file", _decompress),
    (b"\x28\xb5\x2f\xfd", "a zstd-compressed file", _decompress),
    (b"PK\x03\x04", _ZIP, "extract its files and name them"),
    (b"ARROW1", _ARROW, "load its folder as a Hugging Face data set"),
)
_UTF16 = (b"\xff\xfe", b"\xfe\xff")


def not_text(head: bytes, encoding: str = "utf-8") -> Optional[str]:
    """What a file whose first bytes are ``head`` is, and what to do, when it is no text in ``encoding`` (``"a
    gzip-compressed file: decompress it first ..."``); None for text. Decoding with replacement (the evaluation's
    local data) would read such a file as a document of replacement characters and score it."""
    for magic, what, fix in _MAGIC:
        if head.startswith(magic):
            return f"{what}, not text: {fix() if callable(fix) else fix}"
    if codecs.lookup(encoding).name.startswith(("utf-16", "utf-32")):
        return None  # NUL bytes are its text's
    if head.startswith(_UTF16):
        return ("UTF-16 text (its byte-order mark), not UTF-8: convert it (iconv -f UTF-16 -t UTF-8), or name its "
                "encoding")
    if b"\x00" in head[:HEAD_BYTES]:
        return "binary (NUL bytes), not text"
    return None
