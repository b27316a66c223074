"""How :func:`~torchtune_longshort.data.corpus.hf_text` loads a source with ``datasets`` and explains a failure:
text files read whole (``sample_by="document"``, :func:`whole_text_files`), a source that cannot load refused in one
line naming its settings and the way on (a loading script, the hub out of reach or offline, a split it lacks:
:func:`load_failure`), and a failure while reading named by its file and line, or as the source failing mid-run
(:func:`read_failure`)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Tuple

from torchtune_longshort._quiet import HeldRecords, late_bars
from torchtune_longshort.data.data_files import explain_load_failure, is_saved_dataset, locate_record, source_folder
from torchtune_longshort.data.file_kinds import DATA_FILE_BUILDERS, data_file_suffixes
from torchtune_longshort.data.file_paths import in_hidden, resolve_files, warn_left_out
from torchtune_longshort.data.source_names import SourceNames
from torchtune_longshort.data.text_files import DataRecordError, DataSourceError
from torchtune_longshort.plural import counted

# PG19 (Rae et al., 2019) in Parquet: splits train / validation / test, fields short_book_title, publication_date, url,
# text. The canonical ``deepmind/pg19`` is a loading script, which ``datasets`` >= 4 refuses to run.
PG19_SOURCE = "emozilla/pg19"


def read_failure(error: Exception, read: int, files: Sequence[Any], text_field: str, source: str,
                  name: Optional[str], split: str, names: SourceNames) -> BaseException:
    """What :func:`hf_text` raises when ``datasets`` fails after ``read`` records: a local file's bad record named
    (file and line), a source that never opened refused as at build (its split named), else the source failing
    mid-run (``error`` itself where nothing better is known)."""
    section = names.where
    if files:
        named = explain_load_failure(files, text_field, names.refused_as, error, names("text_field"),
                                     names.skipping_reader, names("skip_bad_records"))
        if isinstance(named, DataRecordError) or not read:  # a record named, or the files never opened
            return named
    elif not read:  # the source never opened: refused at build (load_failure); read unchecked, the split named
        if isinstance(error, ConnectionError) or hub_answered_missing(error):  # the hub out of reach or without it
            return DataSourceError(str(load_failure(section, source, name, split, error, names)))
        return load_failure(section, source, name, split, error, names) if bad_split(error) else error
    return DataSourceError(names.led(
        f"{source_split(section, source, name, split)}: reading stopped after its first {counted(read, 'record')} "
        f"({type(error).__name__}: {' '.join(str(error).split())[:200]}), after datasets' own retries: the source "
        "(hub, network, disk) failed mid-run"))


def builder_loggers() -> List[str]:
    """The loggers of ``datasets``' packaged builders that read local data files (:data:`~.file_kinds.
    DATA_FILE_BUILDERS`): each its module's name, as its ``datasets.utils.logging.get_logger(__name__)`` names it."""
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES  # deferred: datasets (heavy import)

    return [_PACKAGED_DATASETS_MODULES[b][0] for b in DATA_FILE_BUILDERS if b in _PACKAGED_DATASETS_MODULES]


def rows_held(open_rows: Callable[[], Iterable[Any]], held: HeldRecords) -> Iterator[Any]:
    """The rows of ``open_rows()`` (a ``datasets`` load, streamed or not), the load and each row's read run with
    ``held`` holding the builders' log lines (:func:`builder_loggers`), handed on once the read returns. A failure
    leaves them held: its caller drops them where it names the file and line itself (datasets' json builder logs
    "Failed to load JSON from file '...' with error ... ArrowInvalid ..." before it raises, a second account printed
    ahead of the refusal's one line), else releases them. The load's progress bars (a read not streamed) show only
    once it has run a few seconds (:func:`~torchtune_longshort._quiet.late_bars`): a refusal sooner prints no bar."""
    with held, late_bars():
        rows = iter(open_rows())
    held.release()
    end = object()
    while True:
        with held:
            row = next(rows, end)
        held.release()
        if row is end:
            return
        yield row


def check_not_tab_separated(record: Any, text_field: str, source: Any, load_dataset_kwargs: Mapping[str, Any],
                            where: Callable[[], str], names: SourceNames) -> None:
    """:class:`DataRecordError` (no skipping passes it: every row is read so) for a record of ``source: csv`` without
    ``text_field`` whose column's name is a tab-separated header holding it (``'id\\ttext'``): ``datasets``' csv
    builder splits on commas unless given ``sep``; it reads a folder of ``*.tsv`` files named as the source with
    ``sep: "\\t"``. ``where()`` names the record. Nothing otherwise."""
    if (source != "csv" or {"sep", "delimiter"} & set(load_dataset_kwargs) or not isinstance(record, dict)
            or text_field in record):
        return
    header = next((k for k in record if isinstance(k, str) and text_field in k.split("\t")), None)
    if header is not None:
        error = DataRecordError(
            f"{where()}: no text field {text_field!r} in the record; its fields are {sorted(record)[:12]}, and "
            f"{header!r} is a tab-separated header, read as one column (the csv builder splits on commas): add "
            f"{names('sep')}: \"\\t\", or name the files' folder as {names('source')} (datasets reads *.tsv files "
            "with it)")
        error.skippable = False
        raise error


def source_split(section: str, source: Any, name: Optional[str], split: str) -> str:
    """How :func:`~.corpus.hf_text`'s messages name what it reads: ``dataset 'org/books' (name 'en', split
    'train')``, the name (``datasets``' config) left out where none is given."""
    config = f"name {name!r}, " if name is not None else ""
    return f"{section} {source!r} ({config}split {split!r})"


def row_in(names: SourceNames, source: Any, name: Optional[str], split: str, index: int,
           files: Sequence[Tuple[str, Path]] = ()) -> str:
    """How :func:`~.corpus.hf_text` names its ``index``-th record (0 the first): the line or row of the local
    ``files`` that holds it, as the text reader names it (:func:`~.data_files.locate_record`: ``<file>:<line>``,
    ``<file> row k``), else ``<source_split> row <index>``, counted from 0 as ``datasets`` indexes a split's rows
    (``ds[index]``, ``ds.skip(index)`` of a stream) and as :func:`~.file_kinds.row_of` names a local file's. Led by
    the user's key for the source where one is set (``names.key``: ``ppl_dataset_path in --metadata: <file>:<line>``,
    as a torn line's refusal, :attr:`SourceNames.refused_as`), else by a local file's section and source."""
    row = f"{source_split(names.where, source, name, split)} row {index}"
    lead = names.key or (f"{names.where} {source!r}" if files else "")  # the noun "data set 'x'" said no key
    named = locate_record(files, index, row) if files else row
    return f"{lead}: {named}" if lead else named


def whole_text_files(source: Any, load_dataset_kwargs: Dict[str, Any], module: Any, data_files: Any = None,
                     names: Optional[SourceNames] = None) -> Tuple[Dict[str, Any], Dict[int, str]]:
    """``load_dataset_kwargs`` with ``sample_by="document"`` where ``datasets``' text builder reads ``source`` (with
    these ``data_files`` and ``data_dir``, as ``datasets`` decides it: ``module``, :func:`folder_module` of them)
    and none is given (one document a file, as :func:`local_text` reads), and how earlier versions read it then (the
    source's ``earlier_reading``: ``{mark: clause}``); else the kwargs as given and ``{}``. A local folder's data
    files that ``datasets`` leaves out (it reads those of the most common suffix) are named in one warning, where no
    ``data_files`` (nor ``data_dir``) names what to read."""
    data_dir = load_dataset_kwargs.get("data_dir")
    builder = folder_builder(module)
    named = data_files is not None or data_dir is not None
    if builder and not named:
        warn_folder_left_out(source, builder[1], names or SourceNames())
    if "sample_by" in load_dataset_kwargs or not (source == "text" or builder and builder[0] == "text"):
        return load_dataset_kwargs, {}
    said = "read text files one record a line (this version reads each whole, one document a file)"
    if source == "text" or _all_text_files(source):
        mark = 2
    elif not named or (folder_builder(folder_module(source)) or ("",))[0] == "text":  # earlier: the folder alone
        mark = 4  # a folder of mostly *.txt beside other data files (which datasets leaves out): by lines before 4
    else:
        mark = 5  # data_files (data_dir) naming text files in a folder of mostly other data files: by lines before 5
    return {**load_dataset_kwargs, "sample_by": "document"}, {mark: said}


def folder_builder(module: Any) -> Optional[Tuple[str, List[str]]]:
    """``(builder name, the files it reads)`` of a local folder's dataset ``module`` (:func:`folder_module`):
    ``"text"`` for files mostly ``*.txt``, its files those of every split; None where ``module`` is None."""
    if module is None:
        return None
    configs = module.builder_configs_parameters.builder_configs or []
    read = [f for config in configs[:1] for split in (config.data_files or {}).values() for f in split]
    return module.module_path.split(".")[-1], read


def folder_split_files(source: Any, module: Any, split: str, section: str) -> List[Tuple[str, Path]]:
    """``[("<section>.source", file)]`` of the files ``datasets`` reads for ``split`` of a local folder ``source``
    given without ``data_files`` (``module``: :func:`folder_module` of it and its ``data_dir``), in its order: what
    :func:`~.data_files.explain_load_failure` and ``check_not_empty`` read to name a torn line ``<file>:<line>`` or
    an empty file, as they do for named ``data_files``; ``[]`` for another source."""
    module = module if source_folder(source) is not None else None  # not a builder's name
    configs = (module.builder_configs_parameters.builder_configs or []) if module is not None else []
    found = [fs for config in configs[:1] for name, fs in (config.data_files or {}).items() if str(name) == split]
    return [(f"{section}.source", Path(f)) for fs in found[:1] for f in fs]


def folder_module(source: Any, data_files: Any = None, data_dir: Optional[str] = None) -> Any:
    """``datasets``' dataset module of a local folder ``source`` (not one of ``save_to_disk``) given ``data_files``
    and ``data_dir``, as ``load_dataset`` asks for it (``dataset_module_factory``: it lists and sorts every file of
    the folder, most of a start's cost on a folder of many files, so :func:`~.corpus.hf_text` asks it once and hands
    it to :func:`folder_split_files` and :func:`whole_text_files`); None for another source, or where ``datasets``
    finds no data files (the load itself names it)."""
    folder = Path(source).expanduser() if isinstance(source, str) else None
    if folder is None or not folder.is_dir() or is_saved_dataset(source):
        return None
    from datasets.load import dataset_module_factory

    try:
        return dataset_module_factory(str(folder), data_files=data_files, data_dir=data_dir)
    except Exception:  # no data files, an unreadable folder: the load itself names it
        return None


def warn_folder_left_out(source: str, read: Sequence[str], names: SourceNames) -> None:
    """One warning naming the data files of the folder ``source`` that ``datasets`` does not ``read`` (it keeps
    those of the most common suffix: a ``notes.jsonl`` beside books in ``*.txt`` was left out without a word)."""
    kept = {Path(f).resolve() for f in read}
    left = [f for f in resolve_files(source, data_file_suffixes(), names("source")) if f.resolve() not in kept]
    way = (f"datasets reads the folder's files of its most common suffix alone: name the files to read in "
           f"{names('data_files')}, or move the others out of the folder")
    warn_left_out(source, sorted({Path(f).suffix for f in read}), left, names, key="source", way=way)


def _all_text_files(folder: str) -> bool:
    """Whether a folder's data files (its hidden ones left out) are all ``*.txt``: read whole since mark 2."""
    root = Path(folder).expanduser()
    found = [f for f in root.rglob("*") if f.is_file() and f.suffix in data_file_suffixes() and not in_hidden(f, root)]
    return bool(found) and all(f.suffix == ".txt" for f in found)


def offline_variable() -> Optional[str]:
    """``NAME=value`` of the variable that puts ``datasets`` offline, read as it reads them (``datasets.config``):
    ``HF_DATASETS_OFFLINE`` when set (also to a false value, which keeps it online), else ``HF_HUB_OFFLINE`` or,
    when that is unset or empty, ``TRANSFORMERS_OFFLINE`` (huggingface_hub's own rule); None when it is online.
    The package's one reader of them: :func:`load_failure`'s hint and the eval task pack's reasons."""
    for name in ("HF_DATASETS_OFFLINE",) if "HF_DATASETS_OFFLINE" in os.environ else ("HF_HUB_OFFLINE",
                                                                                       "TRANSFORMERS_OFFLINE"):
        value = os.environ.get(name)
        if value:
            return f"{name}={value}" if value.upper() in ("1", "ON", "YES", "TRUE") else None
    return None


def bad_split(error: BaseException) -> bool:
    """datasets' refusal of a split the source does not have ("Bad split: dev. Available splits: [...]")."""
    return isinstance(error, ValueError) and str(error).startswith("Bad split")


def load_failure(section: str, source: str, name: Optional[str], split: str, error: BaseException,
                  names: Optional[SourceNames] = None) -> Exception:
    """The one-line refusal for a source ``datasets`` could not open: what it said, and the way on, in the words of
    its builder (``names``: its settings, and how it reads local files instead)."""
    names = names or SourceNames()
    local = names.local_files
    said = " ".join(str(error).split())[:300] or type(error).__name__
    if bad_split(error):  # datasets' words name no setting
        return ValueError(f"split {split!r} ({names('split')}) is not a split of {source!r}: {said.split('. ', 1)[-1]}")
    answered = hub_answered_missing(error)
    if answered:  # datasets' words: 'Couldn't find any data file at <cwd>/<name>' and 'check your connection'
        token = " (a private or gated one: your token, HF_TOKEN)" if "cannot be accessed" in answered else ""
        source_setting = f" ({names('source')})" if not names.flags or "source" in names.flags else ""
        return ValueError(names.led(
            f"{section} {source!r} (name {name!r}, split {split!r}) cannot be loaded: {hub_endpoint()} answered that "
            f"it has no such dataset ({answered}): check the name's spelling{source_setting}{token}, that HF_ENDPOINT "
            f"names the hub you mean, or read a copy of it from {local}"))
    if isinstance(error, (ValueError, FileNotFoundError)):  # our checks
        return error
    if "scripts are no longer supported" in said:
        hint = ("its hub repository is a loading script, which datasets >= 4 no longer runs: name a copy in Parquet "
                f"or JSON as source (PG19: {PG19_SOURCE}), or {local}")
    elif isinstance(error, ConnectionError) and "OfflineModeIsEnabled" in said:  # set by the user: no cached copy
        # none: huggingface_hub is offline where datasets' own variable says online (HF_DATASETS_OFFLINE=0)
        variable = offline_variable() or "huggingface_hub's HF_HUB_OFFLINE / TRANSFORMERS_OFFLINE"
        hint = (f"offline mode is on ({variable}) and the Hugging Face cache holds no copy of it: run once with "
                f"network access (offline mode off) to cache it, or read {local}")
    elif isinstance(error, ConnectionError):
        hint = ("the hub cannot be reached from here: run with network access, from a copy in the Hugging Face cache "
                f"(HF_DATASETS_OFFLINE=1), or from {local}")
    else:
        settings = [names(a) for a in ("source", "name", "split") if not names.flags or a in names.flags]
        hint = f"check {', '.join(settings[:-1])} and {settings[-1]}, or read {local}"
    return ValueError(names.led(f"{section} {source!r} (name {name!r}, split {split!r}) cannot be loaded "
                                f"({type(error).__name__}: {said}): {hint}"))


def hub_answered_missing(error: BaseException) -> Optional[str]:
    """What the hub answered, where ``datasets`` failed because it has no such dataset (a ``DatasetNotFoundError``
    "doesn't exist on the Hub", or an HTTP 404 anywhere in the error's chain: a mirror or a wrong ``HF_ENDPOINT``,
    which datasets words as 'Couldn't find any data file' and 'check your connection'); None otherwise (the hub
    out of reach, a gated dataset, another failure)."""
    seen, chain = set(), [error]
    while chain:
        err = chain.pop()
        if err is None or id(err) in seen:
            continue
        seen.add(id(err))
        said, kinds = " ".join(str(err).split()), {k.__name__ for k in type(err).__mro__}
        if "DatasetNotFoundError" in kinds and "doesn't exist on the Hub" in said:
            return f"DatasetNotFoundError: {said[:200]}"
        response = getattr(err, "response", None)
        if getattr(response, "status_code", None) == 404:
            if kinds & {"EntryNotFoundError", "RevisionNotFoundError"}:  # the hub's word for its 404: a file or
                continue  # revision it lacks is no missing dataset, nor is the HTTP error it is raised from
            return f"HTTP 404 for {getattr(getattr(response, 'request', None), 'url', None) or said[:200]}"
        chain += [err.__cause__, err.__context__]
    return None


def hub_endpoint() -> str:
    """The hub ``datasets`` asks, as :func:`load_failure` names it: ``HF_ENDPOINT``'s, or the Hugging Face hub."""
    endpoint = os.environ.get("HF_ENDPOINT")
    return f"the hub at HF_ENDPOINT={endpoint}" if endpoint else "the Hugging Face hub (https://huggingface.co)"


def builder_keys(source: Any) -> Optional[Tuple[str, frozenset]]:
    """``(config class name, the keys load_dataset takes)`` where ``source`` names one of ``datasets``' packaged
    builders (``json``, ``csv``, ``parquet``, ``text``...): ``load_dataset``'s own arguments and the builder config's
    fields, which is where :func:`~.corpus.hf_text` hands a key it does not name. None for another source (a hub
    repository or a folder: its builder is known only once it is read)."""
    import dataclasses
    import importlib
    import inspect

    if not isinstance(source, str):
        return None
    import datasets
    from datasets.packaged_modules import _PACKAGED_DATASETS_MODULES

    if source not in _PACKAGED_DATASETS_MODULES:
        return None
    module = importlib.import_module(_PACKAGED_DATASETS_MODULES[source][0])
    builders = [v for v in vars(module).values() if isinstance(v, type) and v.__module__ == module.__name__
                and issubclass(v, datasets.builder.DatasetBuilder)]
    config = getattr(builders[0], "BUILDER_CONFIG_CLASS", None) if len(builders) == 1 else None
    if config is None or not dataclasses.is_dataclass(config):
        return None
    params = set(inspect.signature(datasets.load_dataset).parameters) - {"path", "config_kwargs"}
    return config.__name__, frozenset(params | {f.name for f in dataclasses.fields(config)})
