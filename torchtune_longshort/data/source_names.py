"""How a document source (:mod:`torchtune_longshort.data.corpus`) names what it reads in its messages: the recipe
config's keys of the section that builds it (``dataset.text_field``, ``validation.dataset.text_field``) or a command
line's options (``--text-field``). The builder sets them around the build (:func:`source_names`); a source keeps
the names it was built with for the messages of its later reads."""

from __future__ import annotations

import contextlib
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Iterator, Mapping, TypeVar, Union

from torchtune_longshort.data.file_kinds import COMPRESSED, NOT_DECODED, whole_file
from torchtune_longshort.data.text_files import DataRecordError, SkippedRecord

T = TypeVar("T")


@dataclass(frozen=True)
class SourceNames:
    """How the user spells a document source and its arguments, for its messages: ``dataset`` and
    ``dataset.text_field`` in the recipe's config (``validation.dataset.text_field`` for its validation set), or a
    command line's options (``flags``: argument -> option, e.g. ``{"text_field": "--text-field"}``)."""

    where: str = "dataset"
    flags: Mapping[str, str] = field(default_factory=dict)
    # how this builder reads local files instead of a hub dataset, for the messages of one that cannot be loaded
    local_files: str = "local files (source: json, data_files: ...)"
    # how to read the same local files with the reader that skips a record datasets' parser stops at (a torn line),
    # said after "mend the file, or"
    skipping_reader: str = ("read the same files with torchtune_longshort.data.corpus.local_text (path: them), which "
                            "reads them and skips such records with skip_bad_records: True")
    # the user's key for the source, which starts a refusal of what it read (``ppl_dataset_path in --metadata``,
    # ``passkey_haystack``); ``where`` (a recipe's section) where none: ``where`` is also a noun ("data set 'x'")
    key: str = ""

    @property
    def refused_as(self) -> str:
        """How a refusal of what the source read starts: the user's key for it, else ``where``."""
        return self.key or self.where

    def led(self, said: str) -> str:
        """``said`` (a refusal that names the source by its noun: ``data set 'x' (name ..., split ...) cannot be
        loaded``) led by the user's key where one is set (``ppl_dataset_path in --metadata: data set 'x' ...``), as
        is; a recipe's section (no key) already starts it."""
        return f"{self.key}: {said}" if self.key else said

    def __call__(self, arg: str) -> str:
        return self.flags.get(arg, f"{self.where}.{arg}")

    def turned_on(self, arg: str) -> str:
        """How to turn a boolean argument on: ``dataset.skip_bad_records=True``, or the option alone."""
        return self.flags[arg] if arg in self.flags else f"{self.where}.{arg}=True"


def haystack_names(key: str, local_files: str, skipping_reader: str) -> SourceNames:
    """How a haystack read from the hub names its settings (``passkey_haystack`` in ``--metadata``, the BABILong
    generator's ``--haystack``): it skips unreadable records on its own, by no key of the user's, so a file
    ``datasets``' parser stops at is told that ``key``'s skipping does not reach it, and the way on is the key's own
    local form (``local_files``: a hub failure's; ``skipping_reader``: one that skips a torn line's)."""
    return SourceNames("data set", {"skip_bad_records": f"{key}'s own skipping of unreadable records"},
                       local_files=local_files, skipping_reader=skipping_reader, key=key)


# How the sources built now are named (set by :func:`source_names`; a config's ``dataset`` otherwise).
_NAMES: ContextVar[SourceNames] = ContextVar("torchtune_longshort_source_names", default=SourceNames())


def current_names() -> SourceNames:
    """How a source built now names its arguments."""
    return _NAMES.get()


@contextlib.contextmanager
def source_names(names: SourceNames) -> Iterator[None]:
    """Build sources whose messages, at the start and when read later, name their arguments as ``names`` says."""
    token = _NAMES.set(names)
    try:
        yield
    finally:
        _NAMES.reset(token)


def mend_or_skip(error: object, names: SourceNames) -> DataRecordError:
    """A bad record found before training, with the way on: mend it, or skip such records; bytes that do not decode
    also name the reader's ``encoding`` (a Latin-1 file was told only to be mended or skipped). A fault no skipping
    helps keeps its own way on alone: a compressed file (skipping drops it whole) is told the source that reads it
    compressed, where the user names sources by config keys (a command line's message says to decompress it); a
    whole file of another kind (``file_kinds.whole_file``: Parquet under another suffix, a zip archive, an Arrow file:
    rename, extract, load it) and a file ``datasets``' parser stops at (``skippable`` false) are said as they are."""
    said, ways = str(error), ["mend the record"]
    if COMPRESSED in said:
        return DataRecordError(said if names.flags else (
            f"{said}: read it with {names.where}._component_=torchtune_longshort.data.corpus.hf_text "
            f"({names.where}.source: json or text, {names.where}.data_files: the file; datasets decompresses it)"))
    if whole_file(said) or not getattr(error, "skippable", True):
        return error if isinstance(error, DataRecordError) else DataRecordError(said)
    if NOT_DECODED in said and (not names.flags or "encoding" in names.flags):
        ways.append(f"name the files' encoding ({names('encoding')}: latin-1, cp1252, ...)")
    return DataRecordError(f"{said}: {', '.join(ways)}, or skip such records with "
                           f"{names.turned_on('skip_bad_records')}")


def record_or_skipped(read: Callable[[], T], skip_bad_records: bool) -> Union[T, SkippedRecord]:
    """``read()``, one record of a streamed source; a bad one (:class:`DataRecordError`) raised as it is, or, with
    ``skip_bad_records``, a :class:`SkippedRecord` with its words in its place (the hub's and torchtune's sources)."""
    try:
        return read()
    except DataRecordError as e:
        if not skip_bad_records:
            raise
        return SkippedRecord(str(e))
