"""The local files a ``datasets``-backed source names (``data_files``, ``data_dir``, or a local ``source`` path), as
a torchtune dataset builder (``torchtune.datasets.text_completion_dataset``) or :func:`~.corpus.hf_text` takes them.

``datasets`` reports a bad file with its own parser's words and no file name (an empty file ends in a bare
``StopIteration``; a torn JSON line in "Expected object or value"). Here the files are checked before anything is
built (each exists and is not empty), a build failure is explained by reading the files with this package's reader
(:mod:`~.text_files`: ``<file>:<line>``), and a record index is mapped back to its file and line.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from torchtune_longshort.config.glob_match import glob_files
from torchtune_longshort.data.file_paths import in_split, resolve_files, skipped_links
from torchtune_longshort.data.file_kinds import (
    data_file_suffixes, JSON_SUFFIX, holds_json_lines, json_lines_file, line_of, parquet_file, row_of,
)
from torchtune_longshort.data.folder_entry import no_folder
from torchtune_longshort.data.source_names import SourceNames
from torchtune_longshort.data.text_files import NOT_JSON_ARRAY, DataRecordError, Unparsed, iter_documents, without_bom


def read_again(f: Path) -> bool:
    """Whether this package's reader (:mod:`~.text_files`) reads ``f`` again to name a bad record: a JSON-lines file
    (:func:`~.file_kinds.json_lines_file`), a ``*.json`` or a ``*.txt`` file (a Parquet file is no text)."""
    return f.suffix in (JSON_SUFFIX, ".txt") or json_lines_file(f)


def named_files(args: Mapping[str, Any], where: str) -> List[Tuple[str, Path]]:
    """``[(field, file)]`` of every local file a ``datasets``-backed source's arguments name, in ``datasets``' order;
    a named file or folder that does not exist is refused with its field (``dataset.data_files``). Hub names name no
    file, nor does a hub source's ``data_dir`` (:func:`hub_source`: a folder inside the repository). Of a local folder
    ``source``, as ``datasets`` reads it: its ``data_files`` alone where given (the folder's other files are not
    read), else the files of ``source/data_dir`` (``data_dir`` inside the folder) that its ``split`` reads."""
    out = named_data_files(args, where)
    folder = source_folder(args.get("source"), args.get("data_dir"))
    if folder is not None:  # datasets reads the data_files alone (inside it), else the files of source/data_dir
        if not args.get("data_files"):
            key = "data_dir" if args.get("data_dir") else "source"
            value = args["source"] if key == "source" else os.path.join(args["source"], args["data_dir"])
            files = in_split(resolve_files(value, data_file_suffixes(), f"{where}.{key}"), folder, args.get("split"))
            out += [(f"{where}.{key}", f) for f in files]
        return out
    for key in ("data_dir", "source"):
        value = args.get(key)
        if key == "data_dir" and args.get("data_files") and builder_data_dir(args.get("source"), value):
            continue  # a packaged builder reads the data_files alone, inside data_dir (named_data_files)
        if key == "data_dir" and hub_source(args.get("source")):
            continue  # a folder inside the hub repository: the load reports what the hub says of it
        if key == "source" and looks_local(value) and not Path(value).expanduser().exists():
            # datasets' own "Couldn't find any data file at ..." named no key and came when the run started
            raise FileNotFoundError(f"{where}.source={value!r} does not exist: name a local folder or file that "
                                    "exists, or a Hugging Face hub dataset (owner/name)")
        if isinstance(value, str) and (key == "data_dir" or Path(value).expanduser().exists()):
            field = f"{where}.{key}"
            out += [(field, f) for f in resolve_files(value, data_file_suffixes(), field)]
    return out


def named_data_files(args: Mapping[str, Any], where: str) -> List[Tuple[str, Path]]:
    """``[(field, file)]`` of the local files ``args``' ``data_files`` names (its ``split``'s, of a dict), refused
    with its field when one names nothing. A relative entry is read where ``datasets`` reads it: inside a local
    folder ``source`` (:func:`source_folder`) or a packaged builder's ``data_dir`` (:func:`builder_data_dir`), else
    from the current directory (``~/x.jsonl`` too: :func:`_tilde_in_current_directory`); of a hub source
    (:func:`hub_source`) it names a file inside the repository, not checked here."""
    files = args.get("data_files")
    if isinstance(files, Mapping):
        split = args.get("split", "train")
        files = files.get(split, [v for vs in files.values() for v in ([vs] if isinstance(vs, str) else vs)])
    files = [f for f in ([files] if isinstance(files, (str, Path)) else files or []) if not is_remote(f)]
    if hub_source(args.get("source")):
        from datasets.utils.file_utils import is_relative_path  # deferred: datasets (heavy import)

        files = [f for f in files if not is_relative_path(os.fspath(f))]  # joined to the repository by datasets
    if not files:
        return []
    field = f"{where}.data_files"
    folder = source_folder(args.get("source"), args.get("data_dir"))
    # where a folder entry goes instead, as datasets reads it: a local source's data_dir joins the source (it refuses
    # an absolute one), a builder's data_dir is its folder
    without = " or data_dir" if args.get("data_dir") else ""
    base, instead = f"{where}.source", f"{where}.source (without data_files{without})"
    if folder is None:
        folder, base = builder_data_dir(args.get("source"), args.get("data_dir")), f"{where}.data_dir"
        instead = f"{where}.data_dir (without data_files)" if folder is not None else instead
    if folder is not None:
        files = [g for f in files for g in _in_folder(f, folder, field, base, instead)]
    else:
        files = [g for f in files for g in _tilde_in_current_directory(f, field)]
    for f in files:
        no_folder(f, field, instead)
    return [(field, f) for f in resolve_files(files, data_file_suffixes(), field)]


def source_folder(source: Any, data_dir: Any = None) -> Optional[Path]:
    """The folder ``datasets`` reads a relative ``data_files`` entry in when ``source`` is a local folder (not a
    packaged builder's name, ``json``, ``text``...): ``source/data_dir``, resolved as its local-folder loader does;
    None for any other source (a hub name, a builder: relative entries are read from the current directory)."""
    if not isinstance(source, str) or not Path(source).expanduser().is_dir() or is_saved_dataset(source):
        return None
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES  # deferred: datasets (heavy import)

    if source in _PACKAGED_DATASETS_MODULES:  # load_dataset takes the builder before a folder of that name
        return None
    return Path(source, data_dir or "").expanduser().resolve()


def builder_data_dir(source: Any, data_dir: Any) -> Optional[Path]:
    """The folder a packaged builder (``source: json``, ``text``...) reads a relative ``data_files`` entry in: its
    ``data_dir``, resolved as ``datasets``' ``PackagedDatasetModuleFactory`` resolves it (the entries were read from
    the current directory, which ``load_dataset`` does not read); None without one, or for another source."""
    if not isinstance(source, str) or not isinstance(data_dir, str) or not data_dir:
        return None
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES  # deferred: datasets (heavy import)

    return Path(data_dir).expanduser().resolve() if source in _PACKAGED_DATASETS_MODULES else None


def _in_folder(entry: Any, folder: Path, field: str, source_field: str, instead: str) -> List[Any]:
    """The files a ``data_files`` ``entry`` names inside a local source ``folder``, matched by ``datasets``' own
    ``resolve_pattern`` (a relative entry is joined to the folder); an absolute entry as it is. ``~/x.txt`` is
    relative there: ``datasets`` does not expand ``~`` (it reads ``<folder>/~/x.txt``). A relative entry that matches
    nothing there is refused with ``field``, the folder and the current directory (not read); a folder, as
    :func:`_no_folder` says (``instead``)."""
    from datasets.data_files import resolve_pattern  # deferred: datasets (heavy import)

    if not isinstance(entry, str) or Path(entry).is_absolute():
        return [entry]
    try:
        return resolve_pattern(entry, folder.as_posix())
    except FileNotFoundError:
        no_folder(entry, field, instead, folder)  # said as a folder, not as nothing
        here = f"; {os.getcwd()!r} holds it, but" if (Path(entry).exists() or glob_files(entry)) else ", and"
        home = os.path.expanduser(entry)
        if home != entry and (Path(home).exists() or glob_files(home)):
            here = f"; datasets does not expand ~ (that would be {home!r}), and"
        raise FileNotFoundError(
            f"{field}={entry!r} does not exist in the folder of {source_field}, {str(folder)!r} (no such file or "
            f"glob match){here} datasets reads a relative data_files entry inside that folder, not from the current "
            "directory: name it from that folder, or by its absolute path") from None


def hub_source(source: Any) -> bool:
    """Whether ``load_dataset`` reads ``source`` from the Hugging Face hub, by ``datasets.load``'s
    ``dataset_module_factory`` order: not a packaged builder (``json``...), no local path, and ``hf://...``,
    ``buckets/...`` or a relative name with at most one ``/`` (``allenai/c4``). Its ``data_dir`` and relative
    ``data_files`` name files inside the hub repository (``HubDatasetModuleFactory``), not on the local disk."""
    if not isinstance(source, str) or looks_local(source):
        return False
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES  # deferred: datasets (heavy import)
    from datasets.utils.file_utils import is_relative_path

    if source in _PACKAGED_DATASETS_MODULES:
        return False
    if source.startswith(("hf://datasets/", "hf://buckets/")):
        return True
    if Path(source).expanduser().exists():  # a local folder (datasets reads it) or file: checked as local
        return False
    return source.startswith("buckets/") or (is_relative_path(source) and source.count("/") <= 1)


def _tilde_in_current_directory(entry: Any, field: str) -> List[Any]:
    """The files a ``data_files`` entry read from the current directory names, where it starts with ``~``: matched
    by ``datasets``' own ``resolve_pattern``, which does not expand ``~`` (``<cwd>/~/x.jsonl``); refused with
    ``field`` when that matches nothing. Any other entry as it is."""
    if not isinstance(entry, str) or not entry.startswith("~"):
        return [entry]
    from datasets.data_files import resolve_pattern  # deferred: datasets (heavy import)

    here = os.getcwd()
    try:
        return resolve_pattern(entry, Path(here).as_posix())
    except FileNotFoundError:
        raise FileNotFoundError(
            f"{field}={entry!r} does not exist: datasets does not expand ~ in data_files (it reads "
            f"{os.path.join(here, entry)!r}, not {os.path.expanduser(entry)!r}): name the file by its absolute "
            "path") from None


def looks_local(source: Any) -> bool:
    """Whether a ``source`` can only be a local path (absolute, ``~``, ``./`` or ``../``), never a hub name."""
    return isinstance(source, str) and (source.startswith(("~", "./", "../")) or Path(source).is_absolute())


def is_remote(entry: Any) -> bool:
    """Whether a ``data_files`` entry is a URL ``datasets`` fetches (``hf://datasets/...``, ``https://...``), not a
    local file to check."""
    return isinstance(entry, str) and "://" in entry


def named_path(args: Mapping[str, Any], where: str) -> List[Tuple[str, Path]]:
    """``[(field, path)]`` for a reader's ``path`` argument (``local_text``: a file, folder or glob, or a list of
    them), each refused with its field (``dataset.path[1]``) when it names nothing; ``[]`` without one."""
    value = args.get("path")
    entries = [("", value)] if isinstance(value, str) else [
        (f"[{i}]", v) for i, v in enumerate(value) if isinstance(v, str)] if isinstance(value, (list, tuple)) else []
    out: List[Tuple[str, Path]] = []
    for at, entry in entries:
        p = Path(entry).expanduser()
        links: List[Path] = []
        if not p.exists() and not glob_files(p, links):
            raise FileNotFoundError(f"{where}.path{at}={entry!r} does not exist (no such file, folder or glob match)"
                                    f"{skipped_links(entry, links, refused=True)}")
        out.append((f"{where}.path{at}", p))
    return out


# What ``datasets``' ``Dataset.save_to_disk`` writes beside its Arrow files; ``load_dataset`` refuses such a folder
# ("Please use load_from_disk instead"), while a saved ``DatasetDict`` (dataset_dict.json, a folder per split) loads.
SAVED_DATASET_FILES = ("state.json", "dataset_info.json")


def is_saved_dataset(source: Any) -> bool:
    """Whether ``source`` is a local folder written by ``datasets``' ``Dataset.save_to_disk``."""
    return isinstance(source, str) and all((Path(source).expanduser() / f).is_file() for f in SAVED_DATASET_FILES)


def check_not_saved_dataset(path: Any, setting: str, where: str) -> None:
    """``ValueError`` naming ``setting`` (``dataset.path``) and the way on when ``path`` (a path, or a list of paths)
    names a folder written by ``save_to_disk`` (a ``Dataset``, or a ``DatasetDict``'s ``dataset_dict.json``): a
    text reader (``corpus.local_text``) read its ``dataset_info.json`` / ``state.json`` as records and refused the
    first in their words ("dataset_info.json row 0: no text field 'text' ... its fields are ['citation', ...]"), its
    Arrow rows never read; ``where`` (``dataset``) names the section whose ``_component_`` reads it instead."""
    entries = [("", path)] if isinstance(path, str) else [
        (f"[{i}]", v) for i, v in enumerate(path) if isinstance(v, str)] if isinstance(path, (list, tuple)) else []
    for at, entry in entries:
        if is_saved_dataset(entry) or (Path(entry).expanduser() / "dataset_dict.json").is_file():
            raise ValueError(f"{setting}{at}={entry!r} is a folder written by datasets' save_to_disk (its rows are in "
                             f"Arrow files, which this reader does not take): read it with {where}._component_="
                             f"torchtune_longshort.data.corpus.hf_text and {where}.source={entry!r}")


def load_saved_dataset(folder: str, split: str, split_setting: str) -> Any:
    """The rows of a folder written by ``Dataset.save_to_disk`` (``datasets.load_from_disk``, memory-mapped). Saved
    from one split (its state names it), ``split`` must be that one: ``ValueError`` naming ``split_setting``
    otherwise; saved without a split, its rows are every split's."""
    from datasets import load_from_disk

    ds = load_from_disk(str(Path(folder).expanduser()))
    saved = None if getattr(ds, "split", None) is None else str(ds.split)
    if saved is not None and saved != split:
        raise ValueError(f"split {split!r} ({split_setting}) is not a split of {folder!r}: it holds split {saved!r} "
                         f"alone (a Dataset written by save_to_disk); set it to {saved!r}, or name another folder")
    return ds


def check_not_empty(files: List[Tuple[str, Path]]) -> None:
    """An empty file is refused before step 1, with its field and path."""
    for field, f in files:
        if f.stat().st_size == 0 or ((f.suffix == JSON_SUFFIX or json_lines_file(f)) and not f.read_text(
                errors="replace").strip(" \n\r\t[]")):
            raise ValueError(f"{field}: {f} holds no records (an empty file); name a file with data")


def explain_load_failure(files: List[Tuple[str, Path]], column: Optional[str], where: str, error: BaseException,
                         setting: Optional[str] = None, skipping_reader: Optional[str] = SourceNames.skipping_reader,
                         skip_setting: str = "skip_bad_records", why: str = "") -> Exception:
    """The error to raise when ``datasets`` could not build (or read) the source: the first record of ``files`` that
    no parser reads (a torn JSON line, bytes that are not UTF-8: ``<file>:<line>``, with the way on), else the first
    record without its text (``column``), else the original error with the files named. ``where`` starts the
    reason (a section, or the user's key for the source: :attr:`SourceNames.refused_as`); ``setting``: the source's
    option that names the text column, as the user writes it (default ``<where>.column``, a torchtune builder's;
    ``hf_text``'s: ``dataset.text_field``, ``ppl_text_field in --metadata``);
    ``skipping_reader``: the way on to a reader that skips a torn line, said after "mend the file, or" (None: none
    reads the same files), and
    ``skip_setting``: the skipping that does not reach it, in its caller's words (:class:`SourceNames`:
    ``ppl_skip_bad_records in --metadata``), ``why`` after it. A torn JSON array is one record to any reader (skipping
    it drops the whole file): it is told to be mended alone.

    Parse failures come first: ``datasets``' parser stops at them whatever the settings, while a record without its
    text is one ``skip_bad_records`` skips (naming it sent the user to a record that was not the blocker)."""
    check_not_empty(files)
    named = ", ".join(str(f) for _, f in files) or "no local file"
    cache = cache_problem(error)
    if cache:
        return ValueError(f"{where} ({named}) could not be loaded: {cache}")
    paths = [f for _, f in files if read_again(f)]
    field_problems: List[str] = []

    def note(message: str) -> None:
        if isinstance(message, Unparsed):
            raise DataRecordError(message)
        field_problems.append(message)

    try:
        for _ in iter_documents(paths, column or "text", setting or f"{where}.column", on_bad_record=note):
            pass
    except DataRecordError as e:
        way = "" if skipping_reader is None or f": {NOT_JSON_ARRAY} (" in str(e) else \
            f", or {skipping_reader}"
        return _unskippable(f"{where}: {e}: datasets' parser stops at it ({skip_setting} does not reach it{why}): "
                            f"mend the file{way}")
    if field_problems:
        return _unskippable(f"{where}: {field_problems[0]}")
    return ValueError(f"{where} ({named}) could not be loaded: {type(error).__name__}: {error}")


def cache_problem(error: BaseException) -> Optional[str]:
    """Why ``datasets`` or ``huggingface_hub`` failed, when it could not make, write or read a folder of its own
    (``HOME`` naming a file, a read-only ``HF_HOME``; huggingface_hub reads its token file there before a hub
    request): the folder, the variable that sets it and the fix; None for any other error. The folders are those the
    libraries read from the environment at their import."""
    if not isinstance(error, OSError) or not error.filename:
        return None
    import datasets.config as config  # deferred: datasets (its caller failed in it: already imported)
    from huggingface_hub import constants  # deferred: huggingface_hub (as datasets)

    failed = Path(os.path.abspath(os.fsdecode(error.filename)))
    for who, var, folder in (("datasets", "HF_DATASETS_CACHE", config.HF_DATASETS_CACHE),
                             ("datasets", "HF_MODULES_CACHE", config.HF_MODULES_CACHE),
                             ("huggingface_hub", "HF_HOME", constants.HF_HOME)):
        folder = Path(os.path.abspath(folder))
        if failed == folder or failed in folder.parents or folder in failed.parents:
            fix = var if var in os.environ or var == "HF_HOME" else f"HF_HOME (or {var})"
            return (f"{who} cannot use its folder {var}={str(folder)!r} ({type(error).__name__}: "
                    f"{error.strerror}: {str(failed)!r}); set {fix} to a folder you can write")
    return None


def _unskippable(message: str) -> DataRecordError:
    error = DataRecordError(message)
    error.skippable = False  # datasets' parser stops at it: skip_bad_records does not reach it
    return error


def locate_record(files: List[Tuple[str, Path]], index: int, otherwise: Optional[str] = None) -> str:
    """``<file>:<line>`` (JSON lines) or ``<file> row k`` (a JSON array's or a Parquet file's row, named as the text
    reader names it: :func:`~.file_kinds.row_of`) of the ``index``-th record over ``files``, counted as ``datasets``
    does (blank JSON lines skipped); ``otherwise`` (default ``record <index>``) when the files do not say."""
    place = _record_place(files, index)
    if place is None:
        return otherwise or f"record {index}"
    f, (lines, json_lines), left = place
    return line_of(f, lines[left]) if json_lines else row_of(f, left)


def record_problem(files: List[Tuple[str, Path]], index: int, column: str, where: str) -> Optional[str]:
    """What this package's reader says of the ``index``-th record (``<file>:<line>: no text field ...``), or None
    when it reads it fine or cannot find it."""
    place = _record_place(files, index)
    if place is None:
        return None
    f, _, left = place
    try:
        records = iter_documents([f], column, f"{where}.column")
        for _ in range(left + 1):
            next(records)
    except DataRecordError as e:
        return str(e)
    except StopIteration:
        pass
    return None


def _record_place(files: List[Tuple[str, Path]], index: int) -> Optional[Tuple[Path, Tuple[List[int], bool], int]]:
    """The file holding the ``index``-th record over ``files`` (counted as ``datasets`` does), its records' lines
    (:func:`_record_lines`) and the record's place among them; None when a file before it does not say its records,
    or ``index`` is past the last."""
    left = index
    for _, f in files:
        lines = _record_lines(f)
        if lines is None:
            return None
        if left < len(lines[0]):
            return f, lines, left
        left -= len(lines[0])
    return None


def _record_lines(f: Path) -> Optional[Tuple[List[int], bool]]:
    """1-based line numbers of the records of a JSON-lines file (``*.jsonl``, ``*.ndjson``: :func:`~.file_kinds.
    json_lines_file`; or a ``*.json`` file that holds JSON lines: :func:`~.file_kinds.holds_json_lines`) and True, or
    ``range(n)`` of a JSON array's or a Parquet file's ``n`` rows (its metadata's count) and False; None otherwise."""
    try:
        if f.suffix == JSON_SUFFIX:  # decoded as the text reader decodes it (its default encoding, no BOM)
            text = without_bom(f.read_bytes().decode("utf-8"), "utf-8")
            try:
                rows: Dict[str, Any] = json.loads(text)
            except json.JSONDecodeError as e:
                return (_json_line_numbers(f), True) if holds_json_lines(text, e) else None
            return list(range(len(rows) if isinstance(rows, list) else 1)), False
        if json_lines_file(f):
            return _json_line_numbers(f), True
        if parquet_file(f):
            import pyarrow.parquet as pq  # deferred: only a Parquet file needs it (a dependency of datasets)

            return list(range(pq.ParquetFile(f).metadata.num_rows)), False
    except (OSError, ValueError):
        return None
    return None


def _json_line_numbers(f: Path) -> List[int]:
    """1-based numbers of a JSON-lines file's non-blank lines (``datasets`` skips the blank ones)."""
    with open(f, "rb") as fh:
        return [i + 1 for i, raw in enumerate(fh) if raw.strip()]
