"""Local text files as documents: the one reader behind the training corpus (:func:`~torchtune_longshort.data.corpus.
local_text`), the evaluation tasks' local data (:mod:`torchtune_longshort.eval.long_text`) and the BABILong haystack.

Files by suffix:

* ``*.jsonl`` (``*.ndjson``: a suffix ``datasets`` reads with its ``json`` builder, :func:`~.file_kinds.
  json_lines_file`): one document per non-empty line, a JSON object whose ``text_field`` holds the text;
* ``*.json``: a JSON array of such objects (or one object), or JSON lines (``datasets``' ``to_json`` writes them);
* ``*.parquet`` (``*.geoparquet``, ``*.gpq``: a suffix ``datasets`` reads with its ``parquet`` builder,
  :func:`~.file_kinds.parquet_file`): one document per row, its ``text_field`` column (read with pyarrow, a batch of
  rows at a time);
* anything else: the whole file is one document. A file that is no text (compressed, Parquet under another name,
  UTF-16, binary) is a bad record named with what it is, never text of replacement characters
  (:func:`~.file_kinds.not_text`).

A record that cannot be read (bytes that are not ``encoding``, a line that is not JSON, a missing or non-string
``text_field``) is named with its file and line (``<file>:<line>: ...``) and either raised as ``ValueError`` or,
with ``on_bad_record``, reported and skipped.

Why not ``datasets.load_dataset("json" / "text", ...)``: its JSON loader names the row of its parser, not the file's
line (blank lines shift it), with messages such as "Invalid encoding in string" for a torn line, and it cannot skip
one bad record; its text loader's decode errors name neither file nor byte. Those are the error qualities the
training and evaluation tests pin, so the files are read here, line by line. Hub data sets go through ``datasets``
(:func:`~torchtune_longshort.data.corpus.hf_text`).
"""

from __future__ import annotations

import codecs
import functools
import json
import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple, Union

from torchtune_longshort.data.file_kinds import (
    HEAD_BYTES, JSON_SUFFIX, NOT_DECODED, holds_json_lines, json_lines_file, line_of, not_text, parquet_file,
    row_of,
)
from torchtune_longshort.data.replaced_text import decoded_and_said

BadRecord = Optional[Callable[[str], Any]]


class DataRecordError(ValueError):
    """A record of the training or validation data that cannot be read, named by its file and line (or record).

    The recipe treats it as the end of the run at the last good step: it saves that step and stops (as on a
    signal), so the run resumes once the record is mended.

    ``skippable``: whether ``dataset.skip_bad_records=True`` would skip it (a record read, whose text is missing or
    no string); False for a file ``datasets``' own parser stops at (a torn JSON line, bytes that are not UTF-8: the
    stream ends there, so only mending the file helps)."""

    skippable: bool = True


class DataSourceError(DataRecordError):
    """The data source itself failed mid-run (the hub or a network disk out of reach after ``datasets``' own
    retries), no record of it: the recipe saves the last good step as for a bad record, and the run goes on with
    ``resume=True`` once the source can be read again."""

    skippable = False


class SkippedRecord(tuple):
    """What a streamed source yields, with ``skip_bad_records=True``, in place of a record it cannot read: an empty
    document (no tokens) that keeps the record's place, so that a stream position counts every record read, skipped
    ones included, and a run resumes at the same record whether it skipped records or not. ``message`` names the
    record and what is wrong with it."""

    def __new__(cls, message: str) -> "SkippedRecord":
        record = super().__new__(cls)
        record.message = message
        return record


class Unparsed(str):
    """The message of a record that no parser reads (bytes that are not the encoding, a line that is not JSON, a
    file that is no text or no Parquet), as opposed to a record read whose text field is missing or no string:
    ``datasets``' own parser stops at the first kind, and only this package's reader can skip it."""


# How a JSON array that does not parse is named: the whole file is its one record, so skipping it drops the file
NOT_JSON_ARRAY = "not JSON"
FIRST_READABLE_WITHIN = 1000  # records a skipping source may skip before its first readable one, at build


def check_first_readable(documents: Iterable[Any], what: str) -> None:
    """Read ``documents`` up to its first readable record, before a run starts: a source that skips bad records
    (:class:`SkippedRecord`) must find one among its first :data:`FIRST_READABLE_WITHIN`, or a wrong column would be
    skipped record by record, for the whole run. ``ValueError`` when the source is empty; :class:`DataRecordError`
    naming the first bad record otherwise (a source that does not skip raises it itself)."""
    first, count = None, 0
    for count, doc in enumerate(documents, 1):
        if not isinstance(doc, SkippedRecord):
            return
        first = first or doc.message
        if count >= FIRST_READABLE_WITHIN:
            break
    if first is None:
        raise ValueError(f"{what} is empty")
    raise DataRecordError(f"{what}: none of its first {count} records can be read (skip_bad_records=True skips a "
                          f"bad record, not a source of them); the first: {first}")


def check_encoding(encoding: Any, field: str = "encoding") -> None:
    """``encoding`` names a text encoding Python knows (``codecs.lookup``), or ``ValueError`` naming ``field``: the
    reader's ``LookupError`` came as a traceback, after the run had started."""
    try:
        codecs.lookup(encoding)
    except (LookupError, TypeError):
        raise ValueError(f"{field}={encoding!r} is not a text encoding Python knows: name one such as utf-8, "
                         "latin-1 or cp1252") from None


def check_heads(files: Sequence[Path], encoding: str = "utf-8", head: int = HEAD_BYTES, text_field: str = "text",
                setting: str = "text_field") -> None:
    """The first ``head`` bytes of each of ``files`` decode as ``encoding``; :class:`DataRecordError` in the words
    the reader uses when it reaches them (``<file>: ...`` / ``<file>:<line>: ...``, the byte in that record), or,
    for a JSON-lines file, the reader's words for an earlier line it refuses first (not JSON, no ``text_field``:
    ``setting`` names it), so the refusal names the first bad record in file order, as the run would. A bad byte
    past the head is found only when the corpus is read. An ``encoding`` Python does not know is left to the
    reader."""
    try:
        decoder = codecs.getincrementaldecoder(encoding)
    except LookupError:
        return
    for f in files:
        if parquet_file(f):
            continue  # read by pyarrow when the run starts
        with open(f, "rb") as fh:
            raw = fh.read(head)
        what = not_text(raw, encoding)
        if what:
            raise DataRecordError(f"{f}: {what}")
        try:
            decoder("strict").decode(raw, final=False)  # a character cut at the head's end is no error
        except UnicodeDecodeError as e:
            where, at = str(f), e.start
            if json_lines_file(f):  # the reader decodes line by line and counts from the line's start
                line = raw.count(b"\n", 0, e.start) + 1
                where, at = line_of(f, line), e.start - (raw.rfind(b"\n", 0, e.start) + 1)
                for i, before in enumerate(raw.split(b"\n")[:line - 1]):  # the lines the reader meets first
                    for _ in _json_line(f, before, i, text_field, setting, encoding, None):  # raises at a bad one
                        pass
            raise DataRecordError(f"{where}: {NOT_DECODED} {encoding} ({e.reason} at byte {at})") from None


def text_of_record(record: Any, text_field: str, where: Union[str, Callable[[], str]],
                   setting: str = "text_field") -> str:
    """The string in ``record[text_field]``; ``ValueError`` naming ``where`` (or what ``where()`` says: asked for a
    bad record alone), the record's fields and ``setting`` (the option that picks the field) otherwise."""
    if isinstance(record, dict) and isinstance(record.get(text_field), str):
        return record[text_field]
    where = where() if callable(where) else where
    if not isinstance(record, dict):
        raise DataRecordError(f"{where}: record is a {type(record).__name__}, expected an object with a "
                              f"{text_field!r} field")
    if text_field not in record:
        raise DataRecordError(
            f"{where}: no text field {text_field!r} in the record; its fields are {sorted(record)[:12]}. "
            f"Set {setting} to one of them"
        )
    text = record[text_field]
    if not isinstance(text, str):
        raise DataRecordError(f"{where}: field {text_field!r} holds {type(text).__name__} {str(text)[:40]!r}, expected "
                              "a string")
    return text


def iter_documents(
    files: Sequence[Path],
    text_field: str = "text",
    setting: str = "text_field",
    encoding: str = "utf-8",
    encoding_errors: str = "strict",
    on_bad_record: BadRecord = None,
) -> Iterator[str]:
    """The documents of ``files`` in order (see the module doc for the formats), empty ones included.

    ``encoding_errors``: for whole-file documents, as for ``bytes.decode`` (``"strict"``: undecodable bytes are a bad
    record; ``"replace"``). JSON is always decoded strictly, so a corrupted record is named, never garbled.
    ``on_bad_record``: ``None`` raises ``ValueError`` at the first bad record; a callable gets its message and the
    record is skipped, or replaced by what the callable returns (a :class:`SkippedRecord` keeps its place).
    ``setting`` names the option that picks ``text_field`` in messages.
    """
    for _, doc in iter_located(files, text_field, setting, encoding, encoding_errors, on_bad_record):
        yield doc


# where a record is: (index of its file, its key in the file: a JSON line's (byte offset, line index), a JSON array's
# (row, 0), a whole file's (0, 0))
Location = Tuple[int, int, int]


def iter_located(files: Sequence[Path], text_field: str = "text", setting: str = "text_field",
                 encoding: str = "utf-8", encoding_errors: str = "strict",
                 on_bad_record: BadRecord = None) -> Iterator[Tuple[Location, Any]]:
    """``(location, document)`` of each record :func:`iter_documents` yields, in its order: :func:`read_located`
    reads the record at a location again, without reading the others (random access)."""
    for fi, f in enumerate(files):
        if json_lines_file(f):
            for (offset, i), doc in _json_lines(f, text_field, setting, encoding, on_bad_record):
                yield (fi, offset, i), doc
        else:
            for row, doc in _whole_file(f, text_field, setting, encoding, encoding_errors, on_bad_record):
                yield (fi, row, 0), doc


def read_located(files: Sequence[Path], location: Location, text_field: str = "text", setting: str = "text_field",
                 encoding: str = "utf-8", encoding_errors: str = "strict", on_bad_record: BadRecord = None,
                 parsed: Optional[Dict[int, List[Any]]] = None) -> Iterator[Any]:
    """The record at ``location`` (of :func:`iter_located` over the same ``files``), read as it did: the document, or
    what ``on_bad_record`` returns for it. ``parsed``: a cache of whole files' records by file index (a JSON array
    is parsed once, not once per row); the last file read is kept."""
    fi, key, line = location
    f = files[fi]
    if json_lines_file(f):
        with open(f, "rb") as fh:
            fh.seek(key)
            raw = fh.readline()
        yield from _json_line(f, raw, line, text_field, setting, encoding, on_bad_record)
        return
    if parsed is None or fi not in parsed:
        rows = [doc for _, doc in _whole_file(f, text_field, setting, encoding, encoding_errors, on_bad_record)]
        if parsed is None:
            parsed = {}
        parsed.clear()
        parsed[fi] = rows
    yield parsed[fi][key]


def _whole_file(f: Path, text_field: str, setting: str, encoding: str, encoding_errors: str,
                on_bad_record: BadRecord) -> Iterator[Tuple[int, Any]]:
    """``(row, document)`` of a file that is read whole: a JSON array's or a Parquet file's rows, or the file's text
    (row 0)."""
    if parquet_file(f):
        yield from _parquet_rows(f, text_field, setting, on_bad_record)
        return
    json_file = f.suffix == JSON_SUFFIX
    raw = f.read_bytes()
    what = None if json_file else not_text(raw[:HEAD_BYTES], encoding)
    if what:
        for got in _bad(Unparsed(f"{f}: {what}"), on_bad_record):
            yield 0, got
        return
    replacing = not json_file and encoding_errors == "replace"
    try:
        text = raw.decode(encoding, "strict" if json_file or replacing else encoding_errors)
    except UnicodeDecodeError as e:
        if replacing:  # the evaluation's reading: the text kept, its replaced bytes said once (replaced_text)
            text = decoded_and_said(f, raw, encoding, e)
        else:
            for got in _bad(Unparsed(f"{f}: {NOT_DECODED} {encoding} ({e.reason} at byte {e.start})"), on_bad_record):
                yield 0, got
            return
    text = without_bom(text, encoding)
    if json_file:
        yield from enumerate(_json_array(f, text, text_field, setting, on_bad_record))
    else:  # line ends as Python's text mode reads them (the stdlib corpus, datasets' text builder): \r\n, \r -> \n
        yield 0, text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text  # (no copies when none)


def without_bom(text: str, encoding: str) -> str:
    """``text`` without the UTF-8 byte-order mark an editor may write at a file's start (it is no character of the
    document: ``utf-8-sig`` drops it; a JSON parser refuses it)."""
    if text.startswith("\ufeff") and codecs.lookup(encoding).name == "utf-8":
        return text[1:]
    return text


def _bad(message: str, on_bad_record: BadRecord) -> Iterator[Any]:
    """Raise :class:`DataRecordError` without ``on_bad_record``; else yield what it returns for the record in the
    record's place (nothing for None)."""
    if on_bad_record is None:
        raise DataRecordError(message)
    got = on_bad_record(message)
    if got is not None:
        yield got


def _json_lines(f: Path, text_field: str, setting: str, encoding: str,
                on_bad_record: BadRecord) -> Iterator[Tuple[Tuple[int, int], Any]]:
    """``((byte offset, line index), document)`` of each record of a JSON-lines file."""
    offset = 0
    with open(f, "rb") as fh:
        for i, raw in enumerate(fh):
            for doc in _json_line(f, raw, i, text_field, setting, encoding, on_bad_record):
                yield (offset, i), doc
            offset += len(raw)


def _json_line(f: Path, raw: bytes, i: int, text_field: str, setting: str, encoding: str,
               on_bad_record: BadRecord) -> Iterator[Any]:
    """The document of line ``i`` (``raw``) of a JSON-lines file: none for a blank line."""
    where = line_of(f, i + 1)
    try:
        line = raw.decode(encoding)
    except UnicodeDecodeError as e:
        said = _unparsed(f, f"{where}: {NOT_DECODED} {encoding} ({e.reason} at byte {e.start})", encoding)
        yield from _bad(said, on_bad_record)
        return
    if i == 0:
        line = without_bom(line, encoding)
    if not line.strip():
        return
    try:
        text = text_of_record(json.loads(line), text_field, where, setting)
    except json.JSONDecodeError as e:
        yield from _bad(_unparsed(f, f"{where}: not a JSON line ({e.msg})", encoding), on_bad_record)
        return
    except ValueError as e:
        yield from _bad(str(e), on_bad_record)
        return
    yield text


def _unparsed(f: Path, said: str, encoding: str) -> Unparsed:
    """``said`` of a JSON line no parser reads or, where ``f``'s first bytes are no text (a compressed copy put in
    its place under a running source), what the file is and its fix in the words of a run's start
    (:func:`check_heads`): a whole file, which no skipping mends (``file_kinds.whole_file``). The first bytes are read
    once per version of the file (:func:`_head_kind`), not once per bad line of a file read with skipping on."""
    try:
        stat = os.stat(f)
        what = _head_kind(str(f), (stat.st_ino, stat.st_size, stat.st_mtime_ns), encoding)
    except OSError:  # gone or unreadable since its line was read: the line's own fault is what is known
        what = None
    return Unparsed(f"{f}: {what}" if what else said)


@functools.lru_cache(maxsize=64)
def _head_kind(path: str, version: Tuple[int, int, int], encoding: str) -> Optional[str]:
    """``file_kinds.not_text`` of the first bytes of the file at ``path`` in its ``version`` (inode, size, mtime):
    a compressed copy put in its place is a new version (gzip keeps the mtime; the inode and size differ)."""
    with open(path, "rb") as fh:
        return not_text(fh.read(HEAD_BYTES), encoding)


def _json_array(f: Path, text: str, text_field: str, setting: str, on_bad_record: BadRecord) -> Iterator[str]:
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as e:
        if holds_json_lines(text, e):
            yield from _json_lines_of(f, text, text_field, setting, on_bad_record)
            return
        yield from _bad(Unparsed(f"{f}:{e.lineno}: {NOT_JSON_ARRAY} ({e.msg})"), on_bad_record)
        return
    for i, row in enumerate(rows if isinstance(rows, list) else [rows]):
        try:
            yield text_of_record(row, text_field, row_of(f, i), setting)
        except ValueError as e:
            yield from _bad(str(e), on_bad_record)


def _json_lines_of(f: Path, text: str, text_field: str, setting: str, on_bad_record: BadRecord) -> Iterator[str]:
    """The documents of a ``*.json`` file that holds JSON lines (``datasets``' ``Dataset.to_json`` writes them by
    default, and its ``json`` loader reads them: refused here as "not JSON (Extra data)"), each line's record named
    ``<file>:<line>`` as in a ``*.jsonl`` file."""
    for i, line in enumerate(text.split("\n")):  # not splitlines: a U+2028 inside a string is no line end
        if not line.strip():
            continue
        where = line_of(f, i + 1)
        try:
            yield text_of_record(json.loads(line), text_field, where, setting)
        except json.JSONDecodeError as e:
            yield from _bad(Unparsed(f"{where}: not a JSON line ({e.msg})"), on_bad_record)
        except ValueError as e:
            yield from _bad(str(e), on_bad_record)


def _parquet_rows(f: Path, text_field: str, setting: str, on_bad_record: BadRecord) -> Iterator[Tuple[int, Any]]:
    """``(row, document)`` of each row of a Parquet file: its ``text_field`` column, a batch of rows at a time."""
    import pyarrow.parquet as pq  # deferred: only a Parquet file needs it (a dependency of datasets)

    try:
        pf = pq.ParquetFile(f)
        fields = pf.schema_arrow.names
    except Exception as e:  # pyarrow's ArrowInvalid and kin: a torn or mislabelled file
        for got in _bad(Unparsed(f"{f}: not a Parquet file pyarrow reads ({type(e).__name__}: {e})"), on_bad_record):
            yield 0, got
        return
    if text_field not in fields:  # every row would say it: the file is one bad record
        for got in _bad(f"{f}: no column {text_field!r}; its columns are {fields[:12]}. Set {setting} to one of "
                        "them", on_bad_record):
            yield 0, got
        return
    row = 0
    for batch in pf.iter_batches(columns=[text_field], batch_size=256):
        for value in batch.column(0).to_pylist():
            try:
                yield row, text_of_record({text_field: value}, text_field, row_of(f, row), setting)
            except ValueError as e:
                for got in _bad(str(e), on_bad_record):
                    yield row, got
            row += 1
