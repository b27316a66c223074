"""The evaluation tasks' local text files (``<prefix>_data_files``: paths, globs, folders, or a list of them), read
by the one local-text reader (:mod:`torchtune_longshort.data.text_files`)."""

from __future__ import annotations

from typing import Any, Iterator

from torchtune_longshort.data.file_kinds import record_suffixes
from torchtune_longshort.data.file_paths import NoFileToRead, resolve_files
from torchtune_longshort.data.text_files import DataRecordError, SkippedRecord, iter_documents
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

def local_suffixes() -> tuple:
    """The files a folder in ``data_files`` stands for: ``*.txt`` and the record files
    (:func:`~torchtune_longshort.data.file_kinds.record_suffixes`: ``.jsonl``, ``.json``, ``.ndjson``, ``.parquet``,
    ``.geoparquet``, ``.gpq``)."""
    return (".txt", *record_suffixes())


def exist_hint(error: Exception) -> str:
    """A bad ``data_files`` path's words and the fix, once: a folder's entry that is no file says its own."""
    return str(error) if isinstance(error, NoFileToRead) else f"{error}: name files that exist"


def read_local(data_files: Any, text_field: str, skip_bad_records: bool, setting: str = "text_field",
               files_setting: str = "") -> Iterator[Any]:
    """The documents of local ``data_files`` through the one local-text reader (a record it cannot read: a
    ``SkippedRecord`` with ``skip_bad_records``, else ``DataRecordError``); a bad path as ``TaskDataError``, naming
    ``files_setting`` (the user's key for ``data_files``; by default ``data_files``, and ``setting``'s for files
    without records)."""
    try:
        files = resolve_files(data_files, local_suffixes(), files_setting or "data_files")
    except (FileNotFoundError, ValueError) as e:
        raise TaskDataError(exist_hint(e)) from None
    read = False
    try:
        for doc in iter_documents(files, text_field, setting, encoding_errors="replace",
                                  on_bad_record=SkippedRecord if skip_bad_records else None):
            read = read or isinstance(doc, SkippedRecord) or bool(doc.strip())
            yield doc
    except DataRecordError:
        raise
    except ValueError as e:
        raise TaskDataError(str(e)) from None
    if not read:  # it was "no document of N characters or more", as if the files held short ones
        shown = ", ".join(map(str, files[:3])) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
        said = "holds no records (an empty file)" if len(files) == 1 else "hold no records (empty files)"
        raise TaskDataError(f"{files_setting or setting.replace('text_field', 'data_files', 1)}: {shown} {said}; "
                            "name data to read")
