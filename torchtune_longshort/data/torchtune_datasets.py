"""torchtune datasets as a documents source for the dual-window stream.

A torchtune dataset builder (``torchtune.datasets.text_completion_dataset``, or any builder that takes the tokenizer
first and returns a map-style dataset of ``{"tokens": [...], ...}`` samples) plugs into the recipe's ``dataset`` as it
is: each sample's ``tokens`` (BOS + text + EOS, as torchtune tokenizes it) is one document, and
:class:`~torchtune_longshort.data.dual_window.PackedTokenStream` packs them end to end in index order (the recipe's
``shuffle: True``: in torchtune's seeded order of each pass), so a resumed run reads exactly the same windows.

Every record is checked as the stream reads it: a sample that fails to build (a missing column, a value that is not
text) or holds no token ids raises :class:`~.text_files.DataRecordError` naming the file and line (or record), which
the recipe answers with a checkpoint of the last good step; with ``dataset.skip_bad_records=True`` the record is
skipped instead, counted and logged, and keeps its place in the stream's position. A build that ``datasets``
refuses (an empty file, a torn JSON line) is explained the same way (:mod:`~.data_files`).
"""

from __future__ import annotations

import inspect
import os
import shlex
from pathlib import Path
from typing import Any, List, Optional, Tuple

from torchtune_longshort._quiet import HeldRecords, late_bars
from torchtune_longshort.data.corpus import Documents, local_text
from torchtune_longshort.data.document_source import DocumentSource
from torchtune_longshort.data.file_kinds import record_suffixes
from torchtune_longshort.data.hf_loading import builder_loggers
from torchtune_longshort.data.data_files import (
    explain_load_failure, locate_record, named_files, record_problem, source_folder,
)
from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.data.source_names import record_or_skipped
from torchtune_longshort.data.text_files import DataRecordError, check_first_readable


def takes_tokenizer(component: Any) -> bool:
    """Whether a dataset component (a callable) is a torchtune-style builder: its first parameter is ``tokenizer``."""
    try:
        params = list(inspect.signature(component).parameters)
    except (TypeError, ValueError):
        return False
    return bool(params) and params[0] == "tokenizer"


def text_column_of(builder) -> Optional[str]:
    """The default of a torchtune builder's ``column`` parameter (``text_completion_dataset``: ``"text"``); None for
    a builder without one (``chat_dataset``, ``alpaca_dataset``)."""
    try:
        param = inspect.signature(builder).parameters.get("column")
    except (TypeError, ValueError):
        return None
    default = None if param is None else param.default
    return default if isinstance(default, str) else None


def build_torchtune_dataset(builder: Any, tokenizer: Any, args: dict, where: str = "dataset") -> Any:
    """``builder(tokenizer, **args)``; a failure of ``datasets`` to read the named files is re-raised naming the file
    and line of the first unreadable record (or the files, when they read fine here). ``datasets``' progress bars
    show once the build has run a few seconds (:func:`~torchtune_longshort._quiet.late_bars`): a refusal sooner is
    its one line, no "Generating train split" bar ahead of it."""
    held = HeldRecords(builder_loggers())  # datasets' "Failed to load JSON ..." line, said again by the refusal
    try:
        with held, late_bars():
            return builder(tokenizer, **args)
    except (StopIteration, ValueError, KeyError, TypeError, OSError) as e:
        raise _named(held, _load_failure(builder, args, where, e)) from e
    except Exception as e:  # datasets' DatasetGenerationError and kin
        if type(e).__module__.split(".")[0] != "datasets":
            raise
        raise _named(held, _load_failure(builder, args, where, e)) from e
    finally:
        held.release()


def _load_failure(builder: Any, args: dict, where: str, error: BaseException) -> Exception:
    """The builder's failure explained (:func:`~.data_files.explain_load_failure`) in the section's keys: a torn line
    is past ``{where}.skip_bad_records`` (the builder hands the file to ``datasets``' parser, which skips nothing),
    and the way on is ``corpus.local_text`` over the same files, which skips it (:func:`_skipping_reader`)."""
    files, column = named_files(args, where), args.get("column") or text_column_of(builder)
    return explain_load_failure(files, args.get("column"), where, error, skip_setting=f"{where}.skip_bad_records",
                                skipping_reader=_skipping_reader(files, args, column, where),
                                why=": the builder hands the whole file to that parser, which skips nothing")


def _skipping_reader(files: List[Tuple[str, Any]], args: dict, column: Optional[str], where: str) -> Optional[str]:
    """The section's keys that read ``files`` with ``corpus.local_text``, skipping a torn line; None where it would
    not read what the builder reads: a builder of another layout (no text ``column``: ``chat_dataset``'s
    ``messages``), or a file that is not JSON or Parquet records (``local_text`` reads a ``.txt`` file whole)."""
    if not column or not files or not all(Path(f).suffix in record_suffixes() for _, f in files):
        return None
    paths = [str(f) for _, f in files]
    path = paths[0] if len(paths) == 1 else _named_as_given(args, paths) or f"[{','.join(paths)}]"
    text_field = "" if column == "text" else f" {shlex.quote(f'{where}.text_field={column}')}"
    takes = inspect.signature(local_text).parameters  # the builder's own keys go (torchtune's ~key removes one)
    gone = "".join(f" ~{where}.{key}" for key in args if key not in takes and key != "skip_bad_records")
    # quoted where a shell would split or expand it (a space in a folder's name: the override broke in two)
    return (f"read the same files with {where}._component_=torchtune_longshort.data.corpus.local_text "
            f"{shlex.quote(f'{where}.path={path}')}{text_field} {where}.skip_bad_records=True{gone}")


def _named_as_given(args: dict, paths: List[str]) -> Optional[str]:
    """The builder's own folder (``source``, or ``source/data_dir``, without ``data_files``) or ``data_files`` glob,
    where ``local_text`` reads exactly ``paths`` from it (its own default suffixes, its own walk): named in place of
    a list of every file, which for a folder of hundreds of files made a line no one could paste. None otherwise (a
    folder holding files ``local_text`` reads that ``datasets`` does not, or the other way round)."""
    given, folder = args.get("data_files"), source_folder(args.get("source"), args.get("data_dir"))
    if given is None and folder is not None:
        given = os.path.join(args["source"], args["data_dir"]) if args.get("data_dir") else args["source"]
    elif not isinstance(given, str) or folder is not None:
        return None  # a list, a split's dict, or entries read inside the folder: the files are named one by one
    suffixes = inspect.signature(local_text).parameters["suffixes"].default
    try:  # left_out and hidden given: the walk says nothing of the files it leaves out
        read = [str(f) for f in resolve_files(given, [*suffixes, *record_suffixes()], "path", [], [])]
    except (FileNotFoundError, ValueError):
        return None
    return given if read == paths else None


def _named(held: HeldRecords, error: Exception) -> Exception:
    """``error``, the builders' log lines ``held`` dropped where it names the file and line of the record."""
    if isinstance(error, DataRecordError):
        held.drop()
    return error


def read_record(dataset: Any, i: int, what: str, files: List[Tuple[str, Any]], column: Optional[str],
                where: str = "dataset") -> List[int]:
    """The token ids of sample ``i``, or :class:`DataRecordError` naming where the record is and what is wrong."""
    try:
        sample = dataset[i]
        tokens = sample["tokens"] if isinstance(sample, dict) else None
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        hint = f" (column={column!r})" if column else ""
        found = record_problem(files, i, column, where) if column else None  # a chat / instruct row has no text
        raise DataRecordError(
            f"{what}: {found or locate_record(files, i)} ({type(e).__name__} building the sample{hint}: {e})"
        ) from None
    if not tokens or not all(isinstance(t, int) for t in tokens):
        # a text that is a list tokenizes without an error, to a list per item: name the field, as for a number
        found = record_problem(files, i, column, where) if column else None
        raise DataRecordError(f"{what}: {found}" if found else
                              f"{what}: {locate_record(files, i)} gives no token ids ({type(sample).__name__} "
                              f"{sorted(sample) if isinstance(sample, dict) else ''})")
    from torchtune.data import CROSS_ENTROPY_IGNORE_IDX  # the label torchtune's datasets mask with

    masked = sum(1 for t in sample.get("labels") or () if t == CROSS_ENTROPY_IGNORE_IDX)
    if masked:  # a configuration, not a bad record: never skipped
        raise ValueError(f"{what}: sample {i} masks {masked} of its {len(tokens)} labels (torchtune's "
                         "train_on_input=False, or a chat mask), but the dual windows train on every token of the "
                         f"packed stream and would drop the mask: set {where}.train_on_input=True, or use a text "
                         "dataset")
    return list(tokens)


def torchtune_documents(dataset: Any, name: str = "", args: Optional[dict] = None, where: str = "dataset",
                        skip_bad_records: bool = False, column: Optional[str] = None) -> Documents:
    """A documents source over a torchtune dataset's samples (their ``tokens``), in index order (random access:
    ``count`` and ``read``, for a resumed or shuffled stream), each checked as it is read (:func:`read_record`).
    ``args``: the builder's arguments (the files they name locate a bad record).
    ``column``: the text column the builder reads (``args``' ``column``, else the builder's default, e.g.
    ``text_completion_dataset``'s ``"text"``); None for a builder of another layout (``chat_dataset``'s
    ``messages``, ``alpaca_dataset``'s columns), whose bad record is named by its place alone: the text reader's
    "no text field 'text' ... set dataset.column" named line 1 of the file for any such row.
    ``skip_bad_records``: a bad record is yielded as a :class:`~.text_files.SkippedRecord` (counted and logged by the
    stream) instead of raising; one of the first records must still be readable.

    Refuses packed datasets (``packed=True``: the stream packs documents itself, across window boundaries), non
    map-style datasets and empty ones, naming the dataset.
    """
    what = f"{where} {name or type(dataset).__name__}"
    args = dict(args or {})
    if type(dataset).__name__ == "PackedDataset" or getattr(dataset, "packed", False):
        raise ValueError(f"{what}: pass packed=False; the dual-window stream packs the documents itself")
    if not (hasattr(dataset, "__len__") and hasattr(dataset, "__getitem__")):
        raise ValueError(f"{what}: expected a map-style torchtune dataset (len() and [i]), got {type(dataset)}")
    n = len(dataset)
    files = named_files(args, where)
    if n == 0:
        raise ValueError(f"{what} has no samples ({', '.join(str(f) for _, f in files) or 'no local file'})")
    column = args.get("column") or column

    def docs(indices=range(n)):  # a resumed or shuffled stream reads only the records it needs, in its order
        for i in indices:
            yield record_or_skipped(lambda: read_record(dataset, i, what, files, column, where), skip_bad_records)

    check_first_readable(docs(), what)
    return DocumentSource(docs, f"torchtune dataset {name or what} ({n} samples)", count=n, read=docs)
