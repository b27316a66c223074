"""The data sections: ``dataset`` (the training documents) and ``validation`` (an optional fixed-length set).

A data source is a ``_component_`` node: a documents source of :mod:`torchtune_longshort.data.corpus`, or a
torchtune dataset builder (its first parameter ``tokenizer``, which the recipe passes). Its arguments are bound
against the component's signature; the local files it names must exist, and a ``datasets``-backed file must hold
records, before any folder exists (:mod:`torchtune_longshort.data.data_files`).
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar, Dict, List, Optional, Tuple

from torchtune_longshort.data.corpus import (
    TEXT_SUFFIXES, check_redpajama_book_arguments, hf_text, local_text, pg19, redpajama_book, stdlib,
)
from torchtune_longshort.data.hf_loading import builder_keys
from torchtune_longshort.data.source_names import SourceNames, mend_or_skip
from torchtune_longshort.data.data_files import check_not_empty, check_not_saved_dataset, named_files, named_path
from torchtune_longshort.data.stdlib_corpus import SELECTION_KEYS, check_stdlib_arguments
from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.data.file_kinds import record_suffixes
from torchtune_longshort.data.text_files import DataRecordError, check_encoding, check_heads
from torchtune_longshort.data.torchtune_datasets import takes_tokenizer
from torchtune_longshort.config.fields import FROM_COMPONENT, ComponentSection, Section, setting
from torchtune_longshort.config.values import boolean, integer, length, resolve_component

SKIP_BAD_RECORDS = "skip_bad_records"
# corpus.stdlib's arguments check_stdlib_arguments takes
STDLIB_CHOICES = SELECTION_KEYS


def _not_packed(path: str, value: Any) -> bool:
    if value is not False:
        raise ValueError(f"{path}={value!r} is not accepted: pass packed=False (the dual-window stream packs the "
                         "documents itself, end to end, so that window B can reach e tokens past window A)")
    return value


@dataclass(frozen=True)
class DataSourceConfig(ComponentSection):
    """A documents source (``torchtune_longshort.data.corpus.*``) or a torchtune dataset builder."""

    LOCAL_CHECKS = True

    PASSED_BY_RECIPE: ClassVar[Tuple[str, ...]] = ("tokenizer",)
    LIST_HINT: ClassVar[Optional[str]] = (
        "give one node; one torchtune builder reads several files (data_files: [a.json, b.json]), and so does "
        "torchtune_longshort.data.corpus.local_text (path: [a, b])")
    # Turning skipping on to resume a run that stopped at a bad record continues it exactly (the records before its
    # position were all read); the resumed run logs the change.
    RESUME_APPLIED: ClassVar[Tuple[str, ...]] = (SKIP_BAD_RECORDS,)
    packed: Any = setting(FROM_COMPONENT, doc="torchtune builders: must be false (the stream packs documents itself)",
                          check=_not_packed)
    skip_bad_records: bool = setting(
        False, doc="skip a record that cannot be read (counted, logged, its place kept) instead of stopping the run "
        "at the last good step; for torchtune builders and the corpus' hub and local sources", check=boolean)

    @property
    def takes_tokenizer(self) -> bool:
        """A torchtune dataset builder: built with the recipe's tokenizer, its samples' ``tokens`` are documents."""
        return takes_tokenizer(resolve_component("_component_", self.component))

    @property
    def builder_args(self) -> Dict[str, Any]:
        """The arguments the component is built with: a torchtune builder's without ``skip_bad_records`` (the
        recipe's reader of its samples skips, not the builder)."""
        if self.takes_tokenizer:
            return {k: v for k, v in self.args.items() if k != SKIP_BAD_RECORDS}
        return dict(self.args)

    def node(self):
        from omegaconf import OmegaConf

        return OmegaConf.create({"_component_": self.component, **self.builder_args})

    def input_files(self, where: str) -> List[Tuple[str, Path]]:
        """``[(field, path)]`` of the local files and folders this source reads (refused when missing)."""
        return named_path(self.args, where) + named_files(self.args, where)

    def check(self, where: str) -> None:
        component = resolve_component(f"{where}._component_", self.component)
        if component is stdlib:  # refused when built, unnamed
            check_stdlib_arguments(**{k: v for k, v in self.args.items() if k in STDLIB_CHOICES}, where=where)
        if component is redpajama_book:  # refused when built, after the model had loaded
            check_redpajama_book_arguments(self.args.get("data_files"), self.args.get("source", "json"),
                                           SourceNames(where))
        if SKIP_BAD_RECORDS in self.args and not self.takes_tokenizer:
            params = inspect.signature(resolve_component(f"{where}._component_", self.component)).parameters
            if SKIP_BAD_RECORDS not in params and not any(p.kind is p.VAR_KEYWORD for p in params.values()):
                raise ValueError(f"{where}.{SKIP_BAD_RECORDS} is not accepted by {self.component}: it reads no records "
                                 "that could be skipped; remove the key")
        self._check_builder_keys(where, component)
        if resolve_component(f"{where}._component_", self.component) is local_text and "encoding" in self.args:
            check_encoding(self.args["encoding"], f"{where}.encoding")
        self.input_files(where)
        check_not_empty(named_files(self.args, where))
        self._check_text_heads(where)

    def _check_builder_keys(self, where: str, component: Any) -> None:
        """hf_text (pg19, redpajama_book) hands a key it does not name to ``load_dataset``: over a packaged builder
        (``json``...) one that neither takes is refused now, not once the model has loaded (a key kept from the
        node's earlier ``_component_``: ``include_tests`` of ``corpus.stdlib``)."""
        if component not in (hf_text, pg19, redpajama_book):
            return
        own = {*inspect.signature(component).parameters, *inspect.signature(hf_text).parameters}
        extra = [k for k in self.args if k not in own and k != SKIP_BAD_RECORDS]
        source = self.args.get("source", inspect.signature(component).parameters["source"].default)
        known = builder_keys(source) if extra else None
        bad = [k for k in extra if known is not None and k not in known[1]]
        if bad:
            k = bad[0]
            others = [f"corpus.{f.__name__}" for f in (stdlib, local_text, hf_text, pg19, redpajama_book)
                      if f is not component and k in inspect.signature(f).parameters]
            kept = f" (an argument of {others[0]}: kept from an earlier {where}._component_?)" if others else ""
            raise ValueError(f"{where}.{k} is not an argument of {self.component}, nor of datasets' load_dataset or "
                             f"its {source!r} builder ({known[0]}), to which it hands other keys{kept}: remove it "
                             f"('~{where}.{k}' on the command line)")

    def _check_text_heads(self, where: str) -> None:
        """``corpus.local_text``'s files: their first bytes decode (:func:`~torchtune_longshort.data.text_files.
        check_heads`), so a file named by mistake (gzip, UTF-16) is refused now; the rest is read when the run starts
        (reading whole corpora is not a config check's to do). With skip_bad_records the run skips it: not refused."""
        if (resolve_component(f"{where}._component_", self.component) is not local_text
                or not isinstance(self.args.get("path"), (str, list, tuple))):
            return
        check_not_saved_dataset(self.args["path"], f"{where}.path", where)  # no record of it to skip
        if self.args.get(SKIP_BAD_RECORDS):
            return
        suffixes = [*self.args.get("suffixes", TEXT_SUFFIXES), *record_suffixes()]
        field = self.args.get("text_field", inspect.signature(local_text).parameters["text_field"].default)
        try:
            check_heads(resolve_files(self.args["path"], suffixes, f"{where}.path"),
                        self.args.get("encoding", "utf-8"), text_field=field, setting=f"{where}.text_field")
        except DataRecordError as e:
            raise mend_or_skip(f"{where}.path: {e}", SourceNames(where)) from None


@dataclass(frozen=True)
class ValidationConfig(Section):
    """Plain next-token cross-entropy on fixed-length sequences, logged as ``val_ce`` / ``val_ppl``."""

    dataset: DataSourceConfig = setting(doc="the validation documents (a data source node)", section=DataSourceConfig)
    seq_len: int = setting(doc="tokens per validation sequence (at most the model's positions)", check=length(2))
    num_sequences: int = setting(doc="number of sequences (the source is read once, never cycled)", check=integer(1))
    every_n_steps: Optional[int] = setting(None, doc="validate every n steps (default: at the last step only)",
                                           check=integer(1))
