"""Long-corpus document sources for :class:`~torchtune_longshort.data.dual_window.PackedTokenStream`.

Each function here returns a *callable* that yields documents (strings) afresh on every call, which is what the
packed stream needs to cycle over epochs and to resume (it skips the documents it already consumed). Use them as
the ``dataset`` component of a recipe config::

    dataset:
      _component_: torchtune_longshort.data.corpus.pg19          # streaming Hugging Face dataset
    dataset:
      _component_: torchtune_longshort.data.corpus.local_text    # a file, a folder of files, or JSONL
      path: /data/books
    dataset:
      _component_: torchtune_longshort.data.corpus.stdlib        # the embedded default (no download)

Tokenization and packing happen on the fly in the stream; nothing is downloaded at import time or when the
callable is built. Hugging Face sources are opened with ``streaming=True`` (as the paper trained on PG19 and
RedPajama-Book) unless told otherwise; ``hf_text`` also reads local ``json``/``text`` builders, which is how the
tests exercise the same code path offline.
"""

from __future__ import annotations

import logging
from array import array
from functools import partial
from itertools import islice
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

from torchtune_longshort._quiet import HeldRecords
from torchtune_longshort.data.data_files import (
    check_not_empty, check_not_saved_dataset, is_saved_dataset, load_saved_dataset, named_data_files,
)
from torchtune_longshort.data.document_source import DocumentSource, kept
from torchtune_longshort.data.resume_reading import line_ends_read_otherwise
from torchtune_longshort.data.shuffled import Shuffled
from torchtune_longshort.data.source_names import SourceNames, current_names, mend_or_skip, record_or_skipped
from torchtune_longshort.data.stdlib_corpus import iter_stdlib_documents, stdlib_document, stdlib_source_files
from torchtune_longshort.data.file_kinds import (
    JSON_LINES_SUFFIX, PARQUET_SUFFIX, json_lines_file, parquet_file, record_suffixes,
)
from torchtune_longshort.data.text_files import (
    DataRecordError,
    DataSourceError,
    SkippedRecord,
    check_encoding,
    check_first_readable,
    iter_documents,
    iter_located,
    read_located,
    text_of_record,
)
from torchtune_longshort.data.file_paths import resolve_files, warn_left_out
from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.data.hf_loading import (
    PG19_SOURCE, builder_loggers, check_not_tab_separated, folder_module, folder_split_files, load_failure,
    read_failure, row_in, rows_held, whole_text_files,
)
from torchtune_longshort.plural import counted

Documents = Callable[[], Iterator[str]]
TEXT_SUFFIXES = (".txt", ".md", ".py", ".rst", ".tex")
log = logging.getLogger(__name__)


def stdlib(min_bytes: int = 0, include_tests: Union[bool, str] = True, limit: Optional[int] = None,
           shuffle_seed: Optional[int] = None, piece_chars: Optional[int] = None,
           split: Optional[str] = None) -> Documents:
    """The Python standard library's source files (the embedded offline default; see ``stdlib_corpus``);
    ``include_tests="only"``: just the test packages, the text a corpus read with ``include_tests=False`` holds out.
    ``split="train"`` / ``"heldout"``: the corpus's two disjoint parts (the test packages and one file in
    ``stdlib_corpus.HELDOUT_EVERY`` of the others are held out), for installs without the test packages.

    Files come in sorted path order (one package after another) unless ``shuffle_seed`` is given (see
    :class:`Shuffled`); ``piece_chars`` (with ``shuffle_seed``) first cuts each file into pieces of about that many
    characters, which pre-training wants: batches then mix many packages."""
    names = current_names()
    check_pieces(piece_chars, shuffle_seed, names)
    try:  # fail early; the files go with the source (the recipe compares validation's with training's)
        files = stdlib_source_files(min_bytes=min_bytes, include_tests=include_tests, limit=limit, split=split)
    except FileNotFoundError as e:  # named by its key where min_bytes is one (a caller's flag "": it is not)
        if not min_bytes or not names("min_bytes"):
            raise
        raise FileNotFoundError(f"{names('min_bytes')}={min_bytes!r}: {e}; lower {names('min_bytes')}") from None
    source = DocumentSource(
        lambda: iter_stdlib_documents(min_bytes=min_bytes, include_tests=include_tests, limit=limit, split=split),
        f"stdlib(min_bytes={min_bytes}, include_tests={include_tests}, limit={limit}"
        + (f", split={split}" if split else "") + ")", files,
        count=len(files), read=lambda indices: (stdlib_document(files[i]) for i in indices),
    )
    return source if shuffle_seed is None else Shuffled(source, shuffle_seed, piece_chars)


def check_pieces(piece_chars: Any, shuffle_seed: Any, names: SourceNames) -> None:
    """``ValueError`` naming the key (``dataset.piece_chars``) for a ``piece_chars`` :func:`stdlib` cannot use."""
    if piece_chars is None:
        return
    if isinstance(piece_chars, bool) or not isinstance(piece_chars, int) or piece_chars < 1:
        raise ValueError(f"{names('piece_chars')}={piece_chars!r} is not accepted: expected an integer >= 1 "
                         "(characters per piece), or null")
    if shuffle_seed is None:
        raise ValueError(f"{names('piece_chars')}={piece_chars!r} needs {names('shuffle_seed')}: pieces in file order "
                         f"would be the same text as before; set {names('shuffle_seed')} (e.g. 0), or remove "
                         f"{names('piece_chars')}")


def local_text(
    path: Union[str, Sequence[str]],
    text_field: str = "text",
    suffixes: Sequence[str] = TEXT_SUFFIXES,
    encoding: str = "utf-8",
    skip_bad_records: bool = False,
) -> Documents:
    """Local text: one file (the whole file is one document), a directory (every file with one of ``suffixes``
    or ``*.jsonl`` / ``*.json`` / ``*.parquet``, recursively, sorted; each text file one document), or records
    (``*.jsonl``: each line an object whose ``text_field`` is one document; a ``*.json`` file: an array of such
    objects; ``*.parquet``, ``*.geoparquet``, ``*.gpq``: each row's ``text_field`` column). ``path`` may be a glob,
    or a list of paths and globs (read in that order). Read by :mod:`torchtune_longshort.data.text_files`.

    The whole corpus is read once here, before any training step: a record that cannot be read (bytes that are
    not ``encoding``, a line that is not JSON, a missing or non-string ``text_field``) fails with its file and line,
    or, with ``skip_bad_records=True``, is skipped, counted in the log here and by the stream as it passes it (its
    place kept, as :func:`hf_text`'s). A corpus with no non-empty document
    fails too. Each record's place (file, line or row) is kept, so the source has random access (``count``,
    ``in_order``): a resumed stream starts at its position, ``shuffle: True`` reads each pass in its permutation.
    """
    names = current_names()
    check_encoding(encoding, names("encoding"))
    check_not_saved_dataset(path, names("path"), names.where)
    suffixes = [suffixes] if isinstance(suffixes, str) else list(suffixes)  # ".txt" is one suffix, not 4 letters
    left_out: List[Path] = []  # from resolve_files' own walk: a folder of many files is walked once
    hidden: List[Path] = []
    files = resolve_files(path, [*suffixes, *record_suffixes()], names("path"), left_out, hidden)
    warn_left_out(path, [*suffixes, *record_suffixes()], left_out, names)
    bad: List[str] = []
    # read again as the stream goes: a skipped record keeps its place (a position counts it); without skipping, a
    # record that went bad since this check stops the run at its last good step, named
    skipped = SkippedRecord if skip_bad_records else None

    def documents() -> Iterator[str]:
        docs = iter_documents(files, text_field, names("text_field"), encoding, on_bad_record=skipped)
        return (doc for doc in docs if kept(doc))

    def read(indices: Sequence[int]) -> Iterator[Any]:  # random access: a resumed or shuffled stream
        parsed: Dict[int, List[Any]] = {}
        for i in indices:
            location = (files_at[i], keys[i], lines[i])
            yield from read_located(files, location, text_field, names("text_field"), encoding,
                                    on_bad_record=skipped, parsed=parsed)

    files_at, keys, lines = array("l"), array("q"), array("q")  # each kept record's location (iter_located)
    note = (lambda m: bad.append(m) or SkippedRecord(m)) if skip_bad_records else None
    try:
        located = iter_located(files, text_field, names("text_field"), encoding, on_bad_record=note)
        for (fi, key, line), doc in located:
            if kept(doc):
                files_at.append(fi)
                keys.append(key)
                lines.append(line)
    except DataRecordError as e:  # at the start: the message says how to go on
        raise mend_or_skip(e, names) from None
    if bad and launched_rank() == 0:  # every process of a launch reads the whole corpus: said once
        log.warning("%s=%r: skipped %s (%s), first: %s",
                    names("path"), path, counted(len(bad), "unreadable record"), names.turned_on("skip_bad_records"),
                    bad[0])
    if len(files_at) == len(bad):
        raise ValueError(f"{names('path')}={path!r} yields no non-empty documents ({counted(len(files), 'file')} "
                         "read): name files that hold text")
    lines_now = [f for f in files if f.suffix != JSON_LINES_SUFFIX and json_lines_file(f)]  # *.ndjson
    rows_now = [f for f in files if f.suffix != PARQUET_SUFFIX and parquet_file(f)]  # *.geoparquet, *.gpq
    earlier = {2: (f"read a folder's hidden files too ({len(hidden)} here, first: {hidden[0]}; this version leaves "
                   "them out)" if hidden else None),
               6: (f"read a {lines_now[0].suffix} file named as such whole, one document, and left it out of a folder "
                   f"({lines_now[0]} here; this version reads its lines as records, as datasets' json builder does)"
                   if lines_now else None),
               7: (f"took a {rows_now[0].suffix} file named as such for no text (refused, or one record skipped), and "
                   "left it out of a folder "
                   f"({rows_now[0]} here; this version reads its rows as records, as datasets' parquet builder does)"
                   if rows_now else None)}
    return DocumentSource(documents, f"local_text({path!r}, {len(files)} files)", files, count=len(files_at), read=read,
                   earlier_reading=earlier, fingerprinted=True, file_of=files_at,
                   earlier_text={3: lambda state: line_ends_read_otherwise(files, encoding)})


def hf_text(
    source: str,
    split: str = "train",
    text_field: str = "text",
    name: Optional[str] = None,
    data_files: Optional[Union[str, List[str], Dict[str, Any]]] = None,
    streaming: bool = True,
    check_first: bool = True,
    skip_bad_records: bool = False,
    **load_dataset_kwargs: Any,
) -> Documents:
    """Documents from a Hugging Face dataset (``datasets.load_dataset(source, name, split=..., streaming=...)``).

    Args:
        source: a hub name (``"emozilla/pg19"``), a builder with local files (``"json"`` + ``data_files``), a local
            folder of data files, or a folder written by ``datasets``' ``save_to_disk`` (a ``Dataset``: its rows,
            read with ``load_from_disk``; a ``DatasetDict``: its ``split``).
        split, name, data_files, streaming: passed to ``load_dataset``.
        text_field: the column holding the text.
        check_first: read the first record now, so a missing column, or a source ``datasets`` cannot load (a hub
            repository that is a loading script, the hub out of reach), fails before training, in one line.
        skip_bad_records: a record without a string ``text_field`` is yielded as a
            :class:`~.text_files.SkippedRecord` (an empty document the stream counts and logs) instead of raising
            :class:`~.text_files.DataRecordError`; one of the first records must still be readable.

    Local files that ``datasets`` cannot parse (a torn JSON line, bytes that are not UTF-8) are read again by
    :mod:`~.text_files`, so the error names the file and line (a :class:`~.text_files.DataRecordError`, at the start
    or mid-run) instead of the parser's row.

    Text files (``source="text"``, or a local folder ``datasets`` reads with its text builder: mostly ``*.txt``) are
    read whole, one document a file, as
    :func:`local_text` reads them (``datasets``' text builder makes each *line* a record: ``sample_by="line"``).
    """
    names = current_names()
    section = names.where
    files = named_data_files({"data_files": data_files, "split": split, "source": source,
                              "data_dir": load_dataset_kwargs.get("data_dir")}, section)
    module = folder_module(source, data_files, load_dataset_kwargs.get("data_dir"))  # asked once: the folder's files
    if data_files is None:  # a folder's own files, as datasets reads them: a torn line or empty file named as above
        files = folder_split_files(source, module, split, section)
    load_dataset_kwargs, earlier = whole_text_files(source, load_dataset_kwargs, module, data_files, names)

    def open_ds():
        from datasets import load_dataset

        if is_saved_dataset(source):  # load_dataset refuses a folder of Dataset.save_to_disk
            return load_saved_dataset(source, split, names("split"))
        return load_dataset(source, name, split=split, data_files=data_files, streaming=streaming,
                            **load_dataset_kwargs)

    def records() -> Iterator[Any]:
        read, held = 0, HeldRecords(builder_loggers() if files else ())  # datasets' line, where a file is named
        try:
            for read, record in enumerate(rows_held(open_ds, held), 1):
                yield record
        except DataRecordError:
            raise
        except Exception as e:
            error = read_failure(e, read, files, text_field, source, name, split, names)
            if isinstance(error, DataRecordError) and not isinstance(error, DataSourceError):  # its file and line
                held.drop()
            if error is e:
                raise
            raise error from e
        finally:
            held.release()

    def docs() -> Iterator[str]:
        for i, rec in enumerate(records()):
            where = partial(row_in, names, source, name, split, i, files)  # asked of a bad record alone
            check_not_tab_separated(rec, text_field, source, load_dataset_kwargs, where, names)
            yield record_or_skipped(lambda: text_of_record(rec, text_field, where, names("text_field")),
                                    skip_bad_records)

    src = DocumentSource(lambda: filter(kept, docs()), f"hf_text({source!r}, name={name!r}, split={split!r}, "
                  f"field={text_field!r})", earlier_reading={**earlier, 3: partial(empties_before, docs)})
    if check_first:
        check_hf_start(docs, names.led(f"{section} {source!r} split {split!r}"), skip_bad_records, text_field, names,
                       lambda e: load_failure(section, source, name, split, e, names), files)
    return src


def check_hf_start(docs: Callable[[], Iterator[Any]], what: str, skip_bad_records: bool, text_field: str,
                   names: SourceNames, failure: Callable[[BaseException], Exception], files: Sequence = ()) -> None:
    """hf_text's ``check_first``: read ``docs()`` (each record as read) up to its first document, refused in one line
    when none can be (``failure``: the message of a source that cannot be loaded). A source whose every record is
    blank (empty or whitespace-only, each left out) is said to be so, not to be empty; one of no record whose local
    ``files`` (``[(field, path)]``) are empty, as a load that is not streamed says it (``check_not_empty``)."""
    blank = []

    def documents() -> Iterator[Any]:
        for doc in docs():
            if kept(doc):
                yield doc
            else:
                blank.append(doc)

    try:
        check_first_readable(documents(), what)
    except DataRecordError as e:  # at the start: a record skipping would pass gets the way on, as local_text's
        if e.skippable and not skip_bad_records:
            raise mend_or_skip(e, names) from None
        raise
    except Exception as e:
        if blank and str(e) == f"{what} is empty":
            raise ValueError(f"{what} yields no non-empty documents: its {counted(len(blank), 'record')} "
                             f"{'is' if len(blank) == 1 else 'are all'} blank "
                             f"({names('text_field')}={text_field!r} is empty or whitespace-only in each): name data "
                             f"that holds text, or the field that holds it ({names('text_field')})") from None
        if str(e) == f"{what} is empty":
            check_not_empty(files)
        raise failure(e) from e


def empties_before(records: Callable[[], Iterable[Any]], state: Dict[str, Any]) -> Optional[str]:
    """How versions before mark 3 read ``records()`` (a stream's, each record as read), where an empty or
    whitespace-only one, a document then, precedes the saved ``state``'s position: its clause; else None (the
    position lands where it did). Only the records before it are read."""
    empty = [i for i, doc in enumerate(islice(records(), int(state["docs_consumed"]))) if not kept(doc)]
    return (f"counted empty and whitespace-only records as documents ({len(empty)} before the saved position, "
            f"first: record {empty[0]}; this version leaves them out)" if empty else None)


# RedPajama-Data-1T (a loading script) took its book subset down; its 1B-token sample keeps one file of books.
REDPAJAMA_1T = "togethercomputer/RedPajama-Data-1T"
REDPAJAMA_BOOK_SAMPLE = "hf://datasets/togethercomputer/RedPajama-Data-1T-Sample/book_sample.jsonl"


def pg19(source: str = PG19_SOURCE, split: str = "train", streaming: bool = True, **kwargs: Any) -> Documents:
    """PG19 books, ``text`` column unless ``text_field`` names another (:data:`PG19_SOURCE`, the Parquet copy of
    ``deepmind/pg19`` with its fields and splits; ``deepmind/pg19`` itself is a loading script that ``datasets`` >= 4
    no longer runs)."""
    return hf_text(source, split=split, **{"text_field": "text", **kwargs}, streaming=streaming)


def check_redpajama_book_arguments(data_files: Any = None, source: Any = "json",
                                   names: Optional[SourceNames] = None) -> None:
    """``ValueError`` when :func:`redpajama_book` would read the taken-down 1T repository: no ``data_files`` for
    the ``json`` source, or ``source`` that repository (asked when it is built, and by the recipe's config check
    before anything is built, naming the config's keys by ``names``)."""
    if source == REDPAJAMA_1T or (source == "json" and data_files is None):
        names = names or SourceNames()
        raise ValueError(
            f"{names.where}: redpajama_book needs {names('data_files')}: {REDPAJAMA_1T} no longer serves its book "
            "subset (taken down; its loading script, which datasets >= 4 does not run, raises for 'book'). Name "
            f"RedPajama's book JSON lines, e.g. {names('data_files')}=/data/redpajama/book/*.jsonl, or its sample's "
            f"{REDPAJAMA_BOOK_SAMPLE}"
        )


def redpajama_book(
    data_files: Optional[Union[str, List[str], Dict[str, Any]]] = None,
    source: str = "json",
    name: Optional[str] = None,
    split: str = "train",
    streaming: bool = True,
    **kwargs: Any,
) -> Documents:
    """The book subset of RedPajama-Data-1T (the paper's main fine-tuning corpus): JSON lines in RedPajama's format
    (``text``, ``meta``, ``red_pajama_subset``), ``text`` column.

    The hub no longer serves it: ``togethercomputer/RedPajama-Data-1T`` dropped the book subset (its loading script
    raises for ``book``) and ``datasets`` >= 4 runs no loading script. ``data_files`` names the books: your copy of
    RedPajama's ``book/*.jsonl``, or the 1T-Sample's book file (:data:`REDPAJAMA_BOOK_SAMPLE`, read from the hub).
    Without them, or with ``source`` the 1T repository, it is refused here, before any training."""
    check_redpajama_book_arguments(data_files, source, current_names())
    return hf_text(source, split=split, name=name, data_files=data_files, streaming=streaming,
                   **{"text_field": "text", **kwargs})
