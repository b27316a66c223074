"""The model's tokenizer as seen from an evaluation task, and fixed-length token sequences cut with it that survive
the text round trip (re-encoding a sequence's text gives back the same ids).

lm-eval hands a task only text, so a task that needs sequences of exactly ``L`` tokens cuts them here with the
model's own tokenizer. Where the texts come from is :mod:`torchtune_longshort.eval.tasks.common.long_text`'s part.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence, Tuple

from torchtune_longshort.eval.tasks.common.missing_tokenizer import missing_tokenizer_line
from torchtune_longshort.eval.tasks.common.unavailable import (
    TaskDataError, TooFewSequences, metadata_trust, model_tokenizer_path)

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
