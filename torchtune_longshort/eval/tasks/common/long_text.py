"""Long texts for the evaluation tasks: sources (stdlib corpus, local files, Hugging Face data sets), the model's
tokenizer as seen from a task, and fixed-length token sequences that survive the text round trip.

lm-eval hands a task only text, so a task that needs sequences of exactly ``L`` tokens (long-context perplexity,
the misalignment metric, passkey prompts of a target length) cuts them here with the model's own tokenizer, then
checks that re-encoding the text gives back the same ``L`` ids. Tasks learn which tokenizer to use from lm-eval's
metadata, which holds the model's ``model_args`` (``tokenizer`` / ``checkpoint_dir`` for ``longshort``,
``tokenizer`` / ``pretrained`` for ``hf``).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence

from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError, guard_hub_iteration

logger = logging.getLogger(__name__)

# Named Hugging Face sources: (dataset path, config name, split, text field).
# PG19's test split as YaRN and CLEX evaluate it.
HF_PRESETS: Dict[str, tuple] = {
    "pg19": ("emozilla/pg19-test", None, "test", "text"),
}
SOURCES = ("stdlib", "stdlib_tests", "local", "hf", *HF_PRESETS)
# The files a folder in ``data_files`` stands for.
LOCAL_SUFFIXES = (".txt", ".jsonl", ".json")


class TaskTokenizer:
    """Encode/decode without special tokens with the evaluated model's tokenizer.

    A local folder or file loads through the project's tokenizer formats
    (:func:`torchtune_longshort.models.checkpoint_tokenizer`: SentencePiece, tiktoken or ``tokenizer.json``, the ids
    the ``longshort`` model and the recipe use); a hub name through transformers' ``AutoTokenizer``.
    """

    def __init__(self, name_or_path: str):
        self.name = str(name_or_path)
        if Path(self.name).expanduser().exists():
            from torchtune_longshort.models.tokenizer_formats import checkpoint_tokenizer

            self._src = checkpoint_tokenizer(self.name)
            self._hf = None
        else:
            from transformers import AutoTokenizer

            self._src = None
            self._hf = AutoTokenizer.from_pretrained(self.name)

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

    Looks at ``tokenizer``, then ``checkpoint_dir`` (``longshort``), then ``pretrained`` (``hf``).
    """
    for key in ("tokenizer", "checkpoint_dir", "pretrained"):
        value = metadata.get(key)
        if isinstance(value, str) and value:
            return TaskTokenizer(value)
    raise TaskDataError(
        "this task sizes its samples in tokens and needs the model's tokenizer: pass it in --model_args "
        "(tokenizer=..., checkpoint_dir=... or pretrained=...) or --metadata '{\"tokenizer\": \"<path>\"}'"
    )


def _read_local(data_files: Any, text_field: str) -> Iterator[str]:
    """The documents of local ``data_files`` through the one local-text reader; its errors as ``TaskDataError``."""
    from torchtune_longshort.data.text_files import iter_documents, resolve_files

    try:
        files = resolve_files(data_files, LOCAL_SUFFIXES, "data_files")
        yield from iter_documents(files, text_field, encoding_errors="replace")
    except (FileNotFoundError, ValueError) as e:
        raise TaskDataError(str(e)) from None


def iter_texts(
    source: str = "stdlib",
    data_files: Any = None,
    dataset_path: Optional[str] = None,
    dataset_name: Optional[str] = None,
    split: str = "test",
    text_field: str = "text",
    min_chars: int = 0,
    alternative: str = "",
) -> Iterator[str]:
    """Yield documents from a source.

    Args:
        source: ``stdlib`` (the Python standard library's sources, offline), ``stdlib_tests`` (only its test
            packages: text held out from a training corpus read with ``include_tests: False``), ``local`` (``data_files``),
            ``hf`` (``dataset_path`` / ``dataset_name`` / ``split``, streamed) or a preset name (``pg19``).
            Giving ``data_files`` implies ``local``.
        data_files: path, glob, folder (its ``.txt`` / ``.jsonl`` / ``.json`` files) or a list of them: ``.jsonl`` /
            ``.json`` give one document per row (field ``text_field``), any other file is one document
            (:mod:`torchtune_longshort.data.text_files`; undecodable bytes are replaced).
        min_chars: skip shorter documents (cheap pre-filter before tokenising).
        alternative: the local-data hint for the reason a hub source that cannot be fetched gives.

    Raises:
        TaskDataError: a bad source / file, or hub data that cannot be fetched (offline, unreachable, not found).
    """
    if data_files:
        source = "local"
    if source not in SOURCES:
        raise TaskDataError(f"source={source!r} is not supported; accepted: {', '.join(SOURCES)}")
    # stdlib and Hugging Face sources are the training loaders' (torchtune_longshort.data.corpus)
    from torchtune_longshort.data import corpus

    if source in ("stdlib", "stdlib_tests"):  # stdlib_tests: the test packages, held out from training corpora
        it: Iterable[str] = corpus.stdlib(min_bytes=min_chars, include_tests="only" if source == "stdlib_tests" else True)()
    elif source == "local":
        if not data_files:
            raise TaskDataError("source='local' needs data_files=<path or glob>")
        it = _read_local(data_files, text_field)
    else:
        if source in HF_PRESETS:
            dataset_path, dataset_name, split, text_field = HF_PRESETS[source]
        if not dataset_path:
            raise TaskDataError("source='hf' needs dataset_path=<Hugging Face data set name>")
        it = guard_hub_iteration(
            corpus.hf_text(dataset_path, split=split, text_field=text_field, name=dataset_name, check_first=False)(),
            f"{dataset_path!r}" + (f" config {dataset_name!r}" if dataset_name else "") + f" split {split!r}",
            alternative,
        )
    for text in it:
        if len(text) >= min_chars:
            yield text


def texts_from_metadata(metadata: Dict[str, Any], prefix: str, min_chars: int = 0) -> Iterator[str]:
    """:func:`iter_texts` configured by a task's metadata keys ``<prefix>_source``, ``<prefix>_data_files``,
    ``<prefix>_dataset_path``, ``<prefix>_dataset_name``, ``<prefix>_split`` and ``<prefix>_text_field``."""
    return iter_texts(
        source=metadata.get(f"{prefix}_source", "stdlib"),
        data_files=metadata.get(f"{prefix}_data_files"),
        dataset_path=metadata.get(f"{prefix}_dataset_path"),
        dataset_name=metadata.get(f"{prefix}_dataset_name"),
        split=metadata.get(f"{prefix}_split", "test"),
        text_field=metadata.get(f"{prefix}_text_field", "text"),
        min_chars=min_chars,
        alternative=f"for local data pass {prefix}_source=stdlib or {prefix}_data_files=<path or glob> in --metadata",
    )


@dataclass
class FixedLengthSample:
    """``length`` tokens of one document (``text`` re-encodes to exactly those ids)."""

    text: str
    token_ids: List[int]
    doc_index: int
    start: int


def fixed_length_samples(
    texts: Iterable[str],
    tokenizer: TaskTokenizer,
    length: int,
    num_samples: int,
    chunks_per_doc: int = 1,
    max_docs: int = 100_000,
) -> List[FixedLengthSample]:
    """Cut ``num_samples`` sequences of exactly ``length`` tokens from ``texts``.

    Each document gives up to ``chunks_per_doc`` non-overlapping chunks, from its start (the protocol of YaRN /
    CLEX: each book truncated to the evaluation length). A chunk is kept only if its decoded text encodes back to
    the same ids; otherwise its start moves one token on (at most 16 tries), so lengths are exact.

    Raises:
        TaskDataError: when fewer than ``num_samples`` chunks exist, naming the longest document seen.
    """
    if length < 2:
        raise TaskDataError(f"length={length} must be >= 2 tokens")
    if num_samples < 1:
        raise TaskDataError(f"num_samples={num_samples} must be >= 1")
    out: List[FixedLengthSample] = []
    longest = 0
    for d, text in enumerate(texts):
        if d >= max_docs or len(out) >= num_samples:
            break
        ids = tokenizer.encode(text)
        longest = max(longest, len(ids))
        start, taken = 0, 0
        while taken < chunks_per_doc and len(out) < num_samples and start + length <= len(ids):
            found = None
            for s in range(start, min(start + 16, len(ids) - length + 1)):
                chunk = ids[s : s + length]
                chunk_text = tokenizer.decode(chunk)
                if tokenizer.encode(chunk_text) == chunk:
                    found = FixedLengthSample(chunk_text, chunk, d, s)
                    break
            if found is None:
                start += length
                continue
            out.append(found)
            taken += 1
            start = found.start + length
    if len(out) < num_samples:
        raise TaskDataError(
            f"only {len(out)} of num_samples={num_samples} sequences of length={length} tokens could be cut "
            f"(longest document: {longest} tokens): use a source with longer documents, raise chunks_per_doc, "
            "or lower the length / num_samples"
        )
    return out
