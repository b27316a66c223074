"""Long texts for the evaluation tasks: sources (stdlib corpus, local files, Hugging Face data sets), and the
fixed-length token sequences a task with metadata prefix ``<prefix>`` scores, configured by its metadata keys.

lm-eval hands a task only text, so a task that needs sequences of exactly ``L`` tokens (long-context perplexity,
the misalignment metric, passkey prompts of a target length) reads its texts here and cuts them with the model's own
tokenizer (:mod:`torchtune_longshort.eval.tasks.common.token_sequences`: the tokenizer as a task sees it, the cut, the
round-trip check). Sequences come from the start of each document (``chunks_per_doc`` of them), or, for a source of
short documents, from consecutive documents joined into one text and cut end to end (``join_documents``, a blank line
between two documents: long streams, as books are). The study's pre-flight check
(:mod:`torchtune_longshort.study.preflight`) asks the same functions before anything trains. Tasks learn which
tokenizer to use from lm-eval's metadata, which holds the model's ``model_args`` (``tokenizer`` / ``checkpoint_dir``
for ``longshort``, ``tokenizer`` / ``pretrained`` for ``hf``).
"""

from __future__ import annotations

import logging
import re
from dataclasses import replace
from typing import Any, Dict, Iterable, Iterator, List, Optional

from torchtune_longshort.data import corpus
from torchtune_longshort.data.file_kinds import whole_file
from torchtune_longshort.data.source_names import SourceNames, source_names
from torchtune_longshort.data.stdlib_corpus import STDLIB_SOURCES  # stdlib sources -> corpus.stdlib()'s arguments
from torchtune_longshort.data.stdlib_overlap import CHECKPOINT_KEYS, overlap_warning, warn_overlap
from torchtune_longshort.data.text_files import DataRecordError, SkippedRecord
from torchtune_longshort.eval.tasks.common.local_files import read_local
from torchtune_longshort.eval.tasks.common.token_sequences import (
    FixedLengthSample, TaskTokenizer, fixed_length_samples, tokenizer_from_metadata)
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError, TooFewSequences, guard_hub_iteration

logger = logging.getLogger(__name__)

# Named Hugging Face sources: (dataset path, config name, split, text field); PG19's test split as YaRN and CLEX use it.
HF_PRESETS: Dict[str, tuple] = {
    "pg19": ("emozilla/pg19-test", None, "test", "text"),
}
SOURCES = (*STDLIB_SOURCES, "local", "hf", *HF_PRESETS)


def readable_texts(documents: Iterable[Any], skip_hint: str, what: str = "", warn: bool = True) -> Iterator[str]:
    """The texts of ``documents`` (a source's iteration), without the records it skipped (each logged as a warning,
    unless not ``warn``: a corpus read again, whose same records were said on its first pass);
    a record it could not read, unskipped, as :class:`TaskDataError` ending in ``skip_hint`` (how to skip; not where
    no skipping passes: the source itself failed, :class:`DataSourceError`, or ``datasets``' parser stopped at a file,
    ``skippable`` false; nor where it would drop a whole file of another kind: ``file_kinds.whole_file``)."""
    skipped = 0
    try:
        for text in documents:
            if isinstance(text, SkippedRecord):
                skipped += 1
                if warn:
                    logger.warning("%sskipped an unreadable record (%d so far): %s", f"{what}: " if what else "",
                                   skipped, text.message)
                continue
            yield text
    except DataRecordError as e:
        # not a source that failed, nor a file datasets' parser stops at, nor a whole file of another kind (skipping
        # would drop the whole file: a compressed one, a zip archive)
        hint = skip_hint and e.skippable and not whole_file(str(e))
        raise TaskDataError(f"{e} ({skip_hint})" if hint else str(e)) from None
    except OSError as e:  # a file it may not open (chmod 000) ended the whole run; no skipping passes it (training's
        if e.filename is None or isinstance(e, ConnectionError):  # DataSourceError alike)
            raise
        raise TaskDataError(f"{what + ': ' if what else ''}{e.filename}: cannot be read ({e.strerror}): make it "
                            "readable, or move it out of the data") from None


def iter_texts(
    source: str = "stdlib",
    data_files: Any = None,
    dataset_path: Optional[str] = None,
    dataset_name: Optional[str] = None,
    split: str = "test",
    text_field: str = "text",
    min_chars: int = 0,
    alternative: str = "",
    skip_bad_records: bool = False,
    skip_hint: str = "",
    text_field_setting: str = "text_field",
    files_setting: str = "", haystack: Optional[SourceNames] = None,
) -> Iterator[str]:
    """Yield documents from a source.

    Args:
        source: ``stdlib`` (the Python standard library's sources, offline), ``stdlib_tests`` (only its test
            packages: text held out from a training corpus read with ``include_tests: False``; absent on Debian and
            Ubuntu installs), ``stdlib_heldout`` (the test packages and one file in three of the rest: held out from a
            training corpus read with ``split: train``, on every install), ``local`` (``data_files``),
            ``hf`` (``dataset_path`` / ``dataset_name`` / ``split``, streamed) or a preset name (``pg19``).
            Giving ``data_files`` implies ``local``.
        data_files: path, glob, folder (its ``.txt`` / ``.jsonl`` / ``.json`` / ``.parquet`` files) or a list of
            them: ``.jsonl`` / ``.json`` / ``.parquet`` give one document per row (field ``text_field``), any other
            file is one document (:mod:`torchtune_longshort.data.text_files`; undecodable bytes are replaced, a
            file that is no text, such as a compressed one, is refused).
        min_chars: skip shorter documents (cheap pre-filter before tokenising).
        alternative: the local-data hint for the reason a hub source that cannot be fetched gives.
        skip_bad_records: a record of a local or hub source that cannot be read (a row whose ``text_field`` is no
            string, a line that is no JSON) is skipped, with a warning, instead of failing; ``skip_hint`` (how to
            ask for that) ends the reason when it is not; ``text_field_setting``: how a reason names ``text_field``;
            ``files_setting``, given: how it names ``data_files``; ``haystack``: a haystack's names for a hub source
            (``source_names.haystack_names``: its key, the local files a hub failure names, its skipping reader).

    Raises:
        TaskDataError: a bad source / file, an unreadable record, or hub data that cannot be fetched (offline,
            unreachable, not found).
    """
    if data_files:
        source = "local"
    if source not in SOURCES:
        raise TaskDataError(f"source={source!r} is not supported; accepted: {', '.join(SOURCES)}")
    # stdlib and Hugging Face sources are the training loaders' (torchtune_longshort.data.corpus)
    if source in STDLIB_SOURCES:
        with source_names(SourceNames("data set", {"min_bytes": ""})):  # min_chars is no key of the user's
            it: Iterable[str] = corpus.stdlib(min_bytes=min_chars, **STDLIB_SOURCES[source])()
    elif source == "local":
        if not data_files:
            raise TaskDataError("source='local' needs data_files=<path or glob>")
        it = read_local(data_files, text_field, skip_bad_records, text_field_setting, files_setting)
    else:
        if source in HF_PRESETS:
            dataset_path, dataset_name, split, text_field = HF_PRESETS[source]
        if not dataset_path:
            raise TaskDataError("source='hf' needs dataset_path=<Hugging Face data set name>")
        split_setting = text_field_setting.replace("text_field", "split", 1)  # ppl_text_field -> ppl_split
        skip_setting = text_field_setting.replace("text_field", "skip_bad_records", 1)  # -> ppl_skip_bad_records
        names = SourceNames("data set", {"text_field": text_field_setting, "split": split_setting,
                                         "skip_bad_records": skip_setting})
        if haystack is not None:  # passkey's haystack: its key, its local files
            names = replace(haystack, flags={**names.flags, **haystack.flags})
        if text_field_setting.endswith("_text_field in --metadata"):  # a task's keys: ppl_dataset_path, ...
            prefix = text_field_setting[:-len("_text_field in --metadata")]
            own = {"source": f"{prefix}_dataset_path in --metadata"} if source == "hf" else {}  # a preset: its name
            key = own.get("source", f"{prefix}_source in --metadata")  # starts a refusal of what it read
            names = SourceNames("data set", {**names.flags, **own}, key=key, local_files=(
                f"local files ({prefix}_data_files=<path or glob> in --metadata, or {prefix}_source=stdlib)"),
                skipping_reader=(f"read the same files with {prefix}_data_files=<them> in --metadata (read by the "
                                 f"task's own reader, which skips such records with {prefix}_skip_bad_records: true)"))
        with source_names(names):
            documents = corpus.hf_text(dataset_path, split=split, text_field=text_field, name=dataset_name,
                                       check_first=False, skip_bad_records=skip_bad_records)
        what = f"{dataset_path!r}" + (f" config {dataset_name!r}" if dataset_name else "") + f" split {split!r}"
        it = guard_hub_iteration(documents(), what, alternative)
    for text in readable_texts(it, skip_hint, f"source {source!r}"):
        if len(text) >= min_chars:
            yield text


# The value a text task's ``<prefix>_<key>`` takes when unset (read here, and by the report's measured settings:
# eval.tasks.TaskFamily.measured_defaults, so a run that spells one out compares equal to one that leaves it out).
TEXT_DEFAULTS = {"source": "stdlib", "split": "test", "text_field": "text", "chunks_per_doc": 1,
                 "join_documents": False, "skip_bad_records": False}


def texts_from_metadata(metadata: Dict[str, Any], prefix: str, min_chars: int = 0) -> Iterator[str]:
    """:func:`iter_texts` configured by a task's metadata keys ``<prefix>_source``, ``<prefix>_data_files``,
    ``<prefix>_dataset_path``, ``<prefix>_dataset_name``, ``<prefix>_split``, ``<prefix>_text_field`` and
    ``<prefix>_skip_bad_records``. A stdlib source that holds text the evaluated checkpoint's run trained on is
    said once, as a warning (:func:`warn_trained_text`)."""
    source = metadata.get(f"{prefix}_source", TEXT_DEFAULTS["source"])
    if not metadata.get(f"{prefix}_data_files"):
        warn_trained_text(metadata, source, f"{prefix}_source")
    return iter_texts(
        source=source,
        data_files=metadata.get(f"{prefix}_data_files"),
        dataset_path=metadata.get(f"{prefix}_dataset_path"),
        dataset_name=metadata.get(f"{prefix}_dataset_name"),
        split=metadata.get(f"{prefix}_split", TEXT_DEFAULTS["split"]),
        text_field=metadata.get(f"{prefix}_text_field", TEXT_DEFAULTS["text_field"]),
        min_chars=min_chars,
        alternative=f"for local data pass {prefix}_source=stdlib or {prefix}_data_files=<path or glob> in --metadata",
        skip_bad_records=flag(metadata, f"{prefix}_skip_bad_records", TEXT_DEFAULTS["skip_bad_records"]),
        skip_hint=f"or skip such records: --metadata '{{\"{prefix}_skip_bad_records\": true}}'",
        text_field_setting=f"{prefix}_text_field in --metadata",
    )


def warn_trained_text(metadata: Dict[str, Any], source: Any, setting: str) -> Optional[str]:
    """Warn (once per run) where the stdlib source ``source``, given as ``setting``, holds files the run that saved
    the evaluated checkpoint (the ``model_args`` in ``metadata``: ``pretrained``, ``checkpoint_dir``, ``peft``)
    trained on, by its recorded ``torchtune_config.yaml`` (:mod:`torchtune_longshort.data.stdlib_overlap`)."""
    return warn_overlap(str(source), [metadata.get(k) for k in CHECKPOINT_KEYS], setting, logger.warning)


def trained_text_overlaps(metadata: Dict[str, Any], sources: Dict[str, Any]) -> List[str]:
    """:func:`warn_trained_text`'s lines, unsaid, for a task's ``metadata`` as lm-eval records it (model_args
    merged): one per ``setting`` of ``sources`` (``{setting: its default}``; ``ppl_source``: ``stdlib``) that names a
    stdlib source the evaluated checkpoint's run trained on. The results' record of what the run warned."""
    paths = [metadata.get(k) for k in CHECKPOINT_KEYS]
    lines = (overlap_warning(str(metadata.get(setting, default)), paths, setting)
             for setting, default in sources.items())
    return [line for line in lines if line]


def flag(metadata: Dict[str, Any], key: str, default: bool = False) -> bool:
    """A true/false metadata value (JSON ``true`` / ``false``, or those words as text); :class:`TaskDataError`
    naming the key for anything else."""
    value = metadata.get(key, default)
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise TaskDataError(f"{key}={value!r}: expected true or false")


def samples_from_metadata(metadata: Dict[str, Any], prefix: str, length: int, num_samples: int,
                          tokenizer: Optional[TaskTokenizer] = None) -> List[FixedLengthSample]:
    """The ``num_samples`` sequences of ``length`` tokens a task with metadata prefix ``prefix`` scores at one length:
    its text source (:func:`texts_from_metadata`), ``<prefix>_chunks_per_doc`` (default 1) and
    ``<prefix>_join_documents`` (default false: each sequence from a document's start; true: from the documents
    packed into one stream), cut with ``tokenizer`` (default: the model's, :func:`tokenizer_from_metadata`).

    Raises:
        TaskDataError: too few sequences, a bad source or a bad value (see :func:`fixed_length_samples`).
    """
    join = flag(metadata, f"{prefix}_join_documents", TEXT_DEFAULTS["join_documents"])
    try:
        chunks = int(metadata.get(f"{prefix}_chunks_per_doc", TEXT_DEFAULTS["chunks_per_doc"]))
    except (TypeError, ValueError):
        raise TaskDataError(f"{prefix}_chunks_per_doc={metadata.get(f'{prefix}_chunks_per_doc')!r}: expected an "
                            "integer >= 1") from None
    tok = tokenizer or tokenizer_from_metadata(metadata)
    # joined, every document counts (short ones too); otherwise skip those too short to hold a sequence, cheaply
    min_chars = 0 if join else length // 2
    texts = texts_from_metadata(metadata, prefix, min_chars=min_chars)
    try:
        return fixed_length_samples(texts, tok, length, num_samples=num_samples, chunks_per_doc=chunks,
                                    join_documents=join, min_chars=min_chars)
    except TooFewSequences as e:  # the hint in the --metadata keys of this task (ppl_join_documents, not bare)
        hint = re.sub(r"\b(join_documents|chunks_per_doc|num_samples)\b", rf"{prefix}_\1", e.hint)
        raise TooFewSequences(e.finding, f"{hint} in --metadata") from None
