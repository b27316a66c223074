"""Long texts for the evaluation tasks: sources (stdlib corpus, local files, Hugging Face data sets), the model's
tokenizer as seen from a task, and fixed-length token sequences that survive the text round trip.

lm-eval hands a task only text, so a task that needs sequences of exactly ``L`` tokens (long-context perplexity,
the misalignment metric, passkey prompts of a target length) cuts them here with the model's own tokenizer, then
checks that re-encoding the text gives back the same ``L`` ids. Sequences come from the start of each document
(``chunks_per_doc`` of them), or, for a source of short documents, from consecutive documents joined into one text
and cut end to end (``join_documents``, a blank line between two documents: long streams, as books are). The study's
pre-flight check (:mod:`torchtune_longshort.study.preflight`) asks the same functions before anything trains. Tasks
learn which tokenizer to use from lm-eval's metadata, which holds the model's ``model_args`` (``tokenizer`` /
``checkpoint_dir`` for ``longshort``, ``tokenizer`` / ``pretrained`` for ``hf``).
"""

from __future__ import annotations

import logging
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from torchtune_longshort.data import corpus
from torchtune_longshort.data.source_names import SourceNames, source_names
from torchtune_longshort.data.stdlib_corpus import STDLIB_SOURCES  # stdlib sources -> corpus.stdlib()'s arguments
from torchtune_longshort.data.text_files import DataRecordError, DataSourceError, SkippedRecord
from torchtune_longshort.eval.tasks.common.local_files import read_local
from torchtune_longshort.eval.tasks.common.missing_tokenizer import missing_tokenizer_line
from torchtune_longshort.eval.tasks.common.unavailable import (
    TaskDataError, TooFewSequences, guard_hub_iteration, metadata_trust, model_tokenizer_path)

logger = logging.getLogger(__name__)

# Named Hugging Face sources: (dataset path, config name, split, text field); PG19's test split as YaRN and CLEX use it.
HF_PRESETS: Dict[str, tuple] = {
    "pg19": ("emozilla/pg19-test", None, "test", "text"),
}
SOURCES = (*STDLIB_SOURCES, "local", "hf", *HF_PRESETS)
# The text between two documents that ``join_documents`` packs into one stream (a blank line).
JOIN_SEPARATOR = "\n\n"
# How many token offsets a cut sequence may move on to find one whose text re-encodes to the same ids.
ROUND_TRIP_SHIFTS = 16
# Tokens a joined stream holds beyond the sequences cut from it: the last one then ends before the stream's end,
# whose tokens could differ from those of the same text followed by more documents.
JOIN_MARGIN = 64


class TaskTokenizer:
    """Encode/decode without special tokens with the evaluated model's tokenizer.

    A local folder or file loads through the project's tokenizer formats (:func:`torchtune_longshort.models.
    checkpoint_tokenizer`: SentencePiece, tiktoken or ``tokenizer.json``, the ids the ``longshort`` model uses:
    special-token strings in text get ``AutoTokenizer``'s ids); a hub name through transformers' ``AutoTokenizer``."""

    def __init__(self, name_or_path: str, trust_remote_code: Any = None, label: str = "tokenizer"):
        self.name = str(name_or_path)
        if Path(self.name).expanduser().exists():
            # deferred: torch (the models package's __init__ imports it; a hub tokenizer name needs none of it)
            from torchtune_longshort.models.tokenizer_formats import checkpoint_tokenizer
            from torchtune_longshort.rope.checkpoint_code import TASK_FIX, component_code

            with component_code(metadata_trust(trust_remote_code), TASK_FIX):  # model_args reach the metadata
                self._src = checkpoint_tokenizer(self.name, parse_special_tokens=True)
            self._hf = None
        else:
            from transformers import AutoTokenizer

            self._src = None
            try:
                self._hf = AutoTokenizer.from_pretrained(self.name)
            except OSError as e:  # transformers' word for a path that is not there and a hub name it cannot get
                raise FileNotFoundError(missing_tokenizer_line(self.name, e, label)) from None

    def encode(self, text: str) -> List[int]:
        """Token ids of ``text``, no BOS/EOS."""
        if self._src is not None:
            return self._src.encode_plain(text)
        return list(self._hf.encode(text, add_special_tokens=False))

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``."""
        if self._src is not None:
            return self._src.decode(list(ids))
        return self._hf.decode(list(ids), skip_special_tokens=True)


def tokenizer_from_metadata(metadata: Dict[str, Any]) -> TaskTokenizer:
    """The model's tokenizer from lm-eval's task metadata (``model_args`` merged with ``--metadata``).

    Looks at ``tokenizer``, then ``checkpoint_dir`` (``longshort``), then ``pretrained`` (``hf``), then at the
    model lm-eval's evaluator runs (:func:`.unavailable.model_tokenizer_path`: Python callers with a TaskManager of
    their own, whose metadata ``simple_evaluate`` leaves without ``model_args``)."""
    for key in ("tokenizer", "checkpoint_dir", "pretrained"):
        value = metadata.get(key)
        if isinstance(value, (str, os.PathLike)) and str(value):  # a Path from Python callers, as the models take
            return TaskTokenizer(str(value), metadata.get("trust_remote_code"))
    path = model_tokenizer_path()  # from Python: the model lm-eval runs (model_args reach no TaskManager of yours)
    if path:
        return TaskTokenizer(path)
    raise TaskDataError(
        "this task sizes its samples in tokens and needs the model's tokenizer: pass it in --model_args "
        "(tokenizer=..., checkpoint_dir=... or pretrained=...) or --metadata '{\"tokenizer\": \"<path>\"}' "
        "(from Python, a TaskManager of your own: TaskManager(metadata={\"tokenizer\": \"<path>\"}), as "
        "lm-eval's simple_evaluate puts model_args there only in the TaskManager it builds)"
    )


def readable_texts(documents: Iterable[Any], skip_hint: str, what: str = "") -> Iterator[str]:
    """The texts of ``documents`` (a source's iteration), without the records it skipped (each logged as a warning);
    a record it could not read, unskipped, as :class:`TaskDataError` ending in ``skip_hint`` (how to skip; not where
    the source itself failed, :class:`DataSourceError`, which no skipping passes)."""
    skipped = 0
    try:
        for text in documents:
            if isinstance(text, SkippedRecord):
                skipped += 1
                logger.warning("%sskipped an unreadable record (%d so far): %s", f"{what}: " if what else "",
                               skipped, text.message)
                continue
            yield text
    except DataRecordError as e:
        hint = skip_hint and not isinstance(e, DataSourceError)
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
    files_setting: str = "", local_files: str = "",
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
            ``files_setting``, given: how it names ``data_files``; ``local_files``: a hub failure's words for them.

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
        names = SourceNames("data set", {"text_field": text_field_setting, "split": split_setting},
                            local_files=local_files or SourceNames.local_files)  # passkey's haystack: its keys
        if text_field_setting.endswith("_text_field in --metadata"):  # a task's keys: ppl_dataset_path, ...
            prefix = text_field_setting[:-len("_text_field in --metadata")]
            own = {"source": f"{prefix}_dataset_path in --metadata"} if source == "hf" else {}  # a preset: its name
            names = SourceNames("data set", {**names.flags, **own}, local_files=(
                f"local files ({prefix}_data_files=<path or glob> in --metadata, or {prefix}_source=stdlib)"))
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
    ``<prefix>_skip_bad_records``."""
    return iter_texts(
        source=metadata.get(f"{prefix}_source", TEXT_DEFAULTS["source"]),
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
                          tokenizer: Optional["TaskTokenizer"] = None) -> List["FixedLengthSample"]:
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


@dataclass
class FixedLengthSample:
    """``length`` tokens of one document (``text`` re-encodes to exactly those ids), from token ``start`` of document
    ``doc_index``; joined documents: from token ``start`` of the stream whose first document is ``doc_index``."""

    text: str
    token_ids: List[int]
    doc_index: int
    start: int


def _round_trip(tokenizer: TaskTokenizer, ids: Sequence[int], start: int, length: int) -> Optional[Tuple[int, str]]:
    """The first offset ``s`` in ``start .. start + ROUND_TRIP_SHIFTS - 1`` whose ``length`` ids decode to a text that
    encodes back to them, with that text; None when there is none."""
    for s in range(start, min(start + ROUND_TRIP_SHIFTS, len(ids) - length + 1)):
        chunk = list(ids[s : s + length])
        text = tokenizer.decode(chunk)
        if tokenizer.encode(text) == chunk:
            return s, text
    return None



def _cut_chunks(tokenizer, ids, length: int, doc: int, limit: int, out: list) -> None:
    """Append to ``out`` up to ``limit`` non-overlapping ``length``-token chunks of ``ids`` (document ``doc``), from
    its start, each one whose text re-encodes to the same ids (:func:`_round_trip`); a chunk that does not is skipped
    by ``length`` tokens."""
    start, taken = 0, 0
    while taken < limit and start + length <= len(ids):
        found = _round_trip(tokenizer, ids, start, length)
        if found is None:
            start += length
            continue
        s, chunk_text = found
        out.append(FixedLengthSample(chunk_text, list(ids[s : s + length]), doc, s))
        taken += 1
        start = s + length

def fixed_length_samples(
    texts: Iterable[str],
    tokenizer: TaskTokenizer,
    length: int,
    num_samples: int,
    chunks_per_doc: int = 1,
    max_docs: int = 100_000,
    join_documents: bool = False,
    min_chars: int = 0,
) -> List[FixedLengthSample]:
    """Cut ``num_samples`` sequences of exactly ``length`` tokens from ``texts``.

    Each document gives up to ``chunks_per_doc`` non-overlapping chunks, from its start (the protocol of YaRN /
    CLEX: each book truncated to the evaluation length). With ``join_documents`` consecutive documents are joined
    into one text, :data:`JOIN_SEPARATOR` between two, as long as the chunks asked for need (by the documents' own
    token counts), and that text is tokenized and cut end to end into consecutive chunks: short documents (source
    files, the stdlib's test packages) then make sequences of any length, as PG19's books do. A sample's
    ``doc_index`` is then its stream's first document and ``start`` its token offset in the stream
    (``chunks_per_doc`` must stay 1). A chunk is kept only if its decoded text encodes back to the same ids;
    otherwise its start moves one token on (at most :data:`ROUND_TRIP_SHIFTS` tries), so lengths are exact.

    ``min_chars``: the caller's source left out documents shorter than this (a cheap pre-filter before
    tokenizing); named in the reason when no document was left to tokenize.

    Raises:
        TaskDataError: when fewer than ``num_samples`` chunks exist, naming the longest document seen (joined: the
            tokens of all documents; none seen: the pre-filter that left none).
    """
    if length < 2:
        raise TaskDataError(f"length={length} must be >= 2 tokens")
    if num_samples < 1:
        raise TaskDataError(f"num_samples={num_samples} must be >= 1")
    if chunks_per_doc < 1:
        raise TaskDataError(f"chunks_per_doc={chunks_per_doc} must be >= 1")
    if join_documents:
        if chunks_per_doc != 1:
            raise TaskDataError(f"chunks_per_doc={chunks_per_doc} with join_documents: the joined stream is cut end "
                                "to end; leave chunks_per_doc at 1")
        return _cut_joined(texts, tokenizer, length, num_samples, max_docs)
    out: List[FixedLengthSample] = []
    longest, seen = 0, 0
    for d, text in enumerate(texts):
        if d >= max_docs or len(out) >= num_samples:
            break
        ids = tokenizer.encode(text)
        longest, seen = max(longest, len(ids)), seen + 1
        _cut_chunks(tokenizer, ids, length, d, min(chunks_per_doc, num_samples - len(out)), out)
    if len(out) < num_samples:
        # none seen after the pre-filter: no document was tokenized, so no token count to give (not "0 tokens")
        doc = (f"no document of {min_chars} characters or more; shorter ones are not tokenized" if not seen
               and min_chars else f"longest document: {longest} tokens")
        raise TooFewSequences(
            f"only {len(out)} of num_samples={num_samples} sequences of length={length} tokens could be cut "
            f"({doc})", "use a source with longer documents, join its documents "
            "(join_documents), raise chunks_per_doc, or lower the length / num_samples"
        )
    return out


def _cut_joined(texts: Iterable[str], tokenizer: TaskTokenizer, length: int, num_samples: int,
                max_docs: int) -> List[FixedLengthSample]:
    """:func:`fixed_length_samples` with ``join_documents``: consecutive documents joined (text, then tokenized as
    one) into a stream long enough for the chunks still wanted (by the documents' own token counts, plus
    :data:`JOIN_MARGIN`), cut end to end; a stream that gives fewer (round-trip shifts) is followed by the next."""
    sep_tokens = len(tokenizer.encode(JOIN_SEPARATOR))
    docs = iter(enumerate(texts))
    out: List[FixedLengthSample] = []
    n_docs, total, exhausted = 0, 0, False
    while len(out) < num_samples and not exhausted:
        want = (num_samples - len(out)) * (length + ROUND_TRIP_SHIFTS) + JOIN_MARGIN
        parts: List[str] = []
        first, estimate = -1, 0
        while estimate < want:
            item = next(docs, None)
            if item is None or item[0] >= max_docs:
                exhausted = True
                break
            d, text = item
            first = d if not parts else first
            parts.append(text)
            n = len(tokenizer.encode(text))
            estimate += n + sep_tokens
            n_docs, total = n_docs + 1, total + n
        if not parts:
            break
        ids = tokenizer.encode(JOIN_SEPARATOR.join(parts))
        _cut_chunks(tokenizer, ids, length, first, num_samples - len(out), out)
    if len(out) < num_samples:
        raise TooFewSequences(
            f"only {len(out)} of num_samples={num_samples} sequences of length={length} tokens could be cut from the "
            f"joined documents ({n_docs} documents, {total} tokens in all)",
            "use a source with more text, or lower the length / num_samples"
        )
    return out
