"""Dual-window batches for long-short alignment (paper Sec. 4).

A stream of documents is tokenized (by the ``tokenize`` it is given: BOS + text + EOS with
``tok.encode(t, add_bos=True, add_eos=True)``, as torchtune's text-completion datasets do) and packed end to end.
For every batch one shift ``e`` is drawn from ``e_range``; each sample is the next ``L + e`` tokens of the packed
stream and is split into

- window A = tokens ``[0, L)`` and window B = tokens ``[e, L + e)``,

each with ordinary next-token labels inside the window (the last position of a window has none, exactly as an
``L``-token torchtune training sample), so ``alpha = 0`` is plain cross-entropy training on the same tokens.

The ``e_range`` grammar (the paper's Table 7 ranges, written in terms of ``L``), its default and the window slices are
:mod:`torchtune_longshort.windows`'s.

Everything is seeded; documents come in the source's order, or (``shuffle_seed``) in torchtune's seeded permutation
of each pass; :meth:`DualWindowBatcher.state_dict` captures the data position (epoch, documents consumed,
leftover tokens) and the ``e`` sampler's RNG so a resumed run sees exactly the batches an uninterrupted run would.
With ``world_size > 1`` every rank draws the same global batch and keeps its own slice of samples, so the
distributed run trains on the same tokens as a single process with the same global batch.
"""

from __future__ import annotations

from typing import Any, Callable, Dict, Iterable, Iterator, List, Optional, Sequence, Union

import torch

from torchtune_longshort.config.values import check_seed
from torchtune_longshort.data.resume_reading import DATA_READING, check_resumable
from torchtune_longshort.data.shuffled import Shuffled
from torchtune_longshort.data.text_files import SkippedRecord
from torchtune_longshort.windows import DEFAULT_E_RANGE, Bound, resolve_e_range, slice_windows, validate_window_length

Document = Union[str, Sequence[int]]


class PackedTokenStream:
    """Tokenize documents on the fly and pack them end to end, cycling over epochs; resumable.

    Args:
        documents: a callable returning a fresh iterator over documents (strings, or lists of token ids that are
            used as they are), e.g. ``lambda: iter(texts)`` or a loader from :mod:`torchtune_longshort.data`.
        tokenize: ``text -> list[int]`` (e.g. ``lambda t: tok.encode(t, add_bos=True, add_eos=True)``); required
            when documents are strings.
        vocab_size: if given, every token id must lie in ``[0, vocab_size)``.
        max_epochs: stop after this many passes (``None``: cycle forever).
        shuffle_seed: if given, each pass reads the documents in a seeded permutation, the order torchtune's
            ``DistributedSampler(shuffle=True, seed=shuffle_seed)`` (one replica) gives after ``set_epoch(epoch)``
            (:func:`pass_order`); the source needs random access (``count`` and ``in_order``: a map-style
            dataset, local files, the stdlib), a source read as a stream is refused.

    A :class:`~.text_files.SkippedRecord` (a record a source skipped, ``skip_bad_records=True``) counts as a document
    consumed, with no tokens, and in :attr:`records_skipped`; :meth:`new_skips` hands the latest to a logger.
    """

    SKIPS_KEPT = 20

    def __init__(
        self,
        documents: Callable[[], Iterable[Document]],
        tokenize: Optional[Callable[[str], List[int]]] = None,
        vocab_size: Optional[int] = None,
        max_epochs: Optional[int] = None,
        shuffle_seed: Optional[int] = None,
    ):
        if not callable(documents):
            raise TypeError("documents must be a callable returning a fresh iterator over documents")
        if shuffle_seed is not None:
            check_seed(shuffle_seed, "shuffle_seed")
            check_random_access(documents)
        self.shuffle_seed = shuffle_seed
        self._documents = documents
        self._tokenize = tokenize
        self.vocab_size = vocab_size
        self.max_epochs = max_epochs
        self.epoch = 0
        self.docs_consumed = 0  # in the current epoch
        self.tokens_consumed = 0  # over the whole run
        self.records_skipped = 0  # over the whole run
        self._new_skips: List[str] = []
        self._buffer: List[int] = []
        self._it: Optional[Iterator[Document]] = None

    # --------------------------------------------------------------- state
    def state_dict(self) -> Dict[str, Any]:
        return {
            "epoch": self.epoch,
            "docs_consumed": self.docs_consumed,
            "tokens_consumed": self.tokens_consumed,
            "records_skipped": self.records_skipped,
            "buffer": list(self._buffer),
            "shuffle_seed": self.shuffle_seed,
            # a source with random access: how many documents it held, so that a resume on other data is refused
            "documents": getattr(self._documents, "count", None),
            "reading": DATA_READING,
            "digests": self._digests(),  # a source of whole local files: their fingerprint, so that an edit is said
        }

    def _digests(self) -> Optional[bytes]:
        digests = getattr(self._documents, "digests", None)
        return digests() if callable(digests) else None

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("shuffle_seed") != self.shuffle_seed:
            raise ValueError(f"cannot resume: the saved data state read documents with shuffle_seed="
                             f"{state.get('shuffle_seed')}, this stream with {self.shuffle_seed}: resume with the seed "
                             "the run was saved with (data_seed, else seed), or start a new run in another output_dir")
        count = getattr(self._documents, "count", None)
        order = pass_order(count, self.shuffle_seed, int(state["epoch"])) if (
            self.shuffle_seed is not None and count is not None) else None
        check_resumable(self._documents, state, self._digests(), order)
        self.epoch = int(state["epoch"])
        self.docs_consumed = int(state["docs_consumed"])
        self.tokens_consumed = int(state["tokens_consumed"])
        self.records_skipped = int(state.get("records_skipped", 0))
        self._buffer = list(state["buffer"])
        self._it = None  # re-created lazily, skipping docs_consumed documents

    def position(self) -> Dict[str, int]:
        """Where the stream is: for error messages and logs."""
        return {"epoch": self.epoch, "docs_consumed": self.docs_consumed, "tokens_consumed": self.tokens_consumed}

    def new_skips(self) -> List[str]:
        """The messages of the records skipped since the last call (the first :attr:`SKIPS_KEPT`), then forgotten;
        their count is the rise of :attr:`records_skipped`."""
        out, self._new_skips = self._new_skips, []
        return out

    # --------------------------------------------------------------- reading
    def _open(self) -> None:
        count = getattr(self._documents, "count", None)
        if self.shuffle_seed is not None:
            order = pass_order(count, self.shuffle_seed, self.epoch)
            if self.docs_consumed > count:
                raise self._cannot_resume(count)
            self._it = self._documents.in_order(order[self.docs_consumed:])
            return
        if count is not None and self.docs_consumed:
            # a source with random access (a torchtune dataset, local files, the stdlib) starts at the position: the
            # documents consumed before it are neither built nor tokenized again (they were, one by one: O(consumed)
            # before the first resumed step)
            if self.docs_consumed > count:
                raise self._cannot_resume(count)
            self._it = self._documents.from_index(self.docs_consumed)
            return
        self._it = iter(self._documents())
        for i in range(self.docs_consumed):
            try:
                next(self._it)
            except StopIteration:
                raise self._cannot_resume(i) from None

    def _cannot_resume(self, count: int) -> ValueError:
        """The refusal of a saved state that consumed more documents than the corpus's ``count``."""
        return ValueError(
            f"cannot resume: the corpus has only {count} documents but the saved state consumed "
            f"{self.docs_consumed} in epoch {self.epoch}: restore the data the run read, or start a new "
            "run in another output_dir")

    def _next_document(self) -> List[int]:
        if self._it is None:
            self._open()
        while True:
            try:
                doc = next(self._it)
            except StopIteration:
                if self.docs_consumed == 0:
                    raise ValueError("the corpus yielded no documents") from None
                self.epoch += 1
                self.docs_consumed = 0
                if self.max_epochs is not None and self.epoch >= self.max_epochs:
                    raise StopIteration
                self._open()
                continue
            self.docs_consumed += 1
            if isinstance(doc, SkippedRecord):
                self.records_skipped += 1
                if len(self._new_skips) < self.SKIPS_KEPT:
                    self._new_skips.append(doc.message)
            ids = self._encode(doc)
            return ids

    def _encode(self, doc: Document) -> List[int]:
        if isinstance(doc, str):
            if self._tokenize is None:
                raise ValueError("documents are strings but no tokenize function was given")
            ids = list(self._tokenize(doc))
        elif isinstance(doc, dict):
            raise ValueError(
                f"document {self.docs_consumed} of epoch {self.epoch} is a dict with keys {sorted(doc)[:8]}: "
                "map it to its text field first (see torchtune_longshort.data loaders' text_field)"
            )
        else:
            ids = [int(t) for t in doc]
        if self.vocab_size is not None and ids:
            lo, hi = min(ids), max(ids)
            if lo < 0 or hi >= self.vocab_size:
                bad = hi if hi >= self.vocab_size else lo
                raise ValueError(
                    f"token id {bad} in document {self.docs_consumed} (epoch {self.epoch}) is outside the model "
                    f"vocabulary [0, {self.vocab_size}): tokenizer and model do not match"
                )
        return ids

    def take(self, n: int) -> List[int]:
        """The next ``n`` tokens of the packed stream (documents shorter than ``n`` are packed, never dropped)."""
        passes_without_tokens = 0
        while len(self._buffer) < n:
            before = self.epoch
            ids = self._next_document()
            self._buffer.extend(ids)
            if ids:  # a pass with no tokens is two pass starts with none between them, not two pass starts
                passes_without_tokens = 0
            elif self.epoch != before:
                passes_without_tokens += 1
                if passes_without_tokens > 1:
                    raise ValueError("the corpus tokenizes to no tokens at all")
        out, self._buffer = self._buffer[:n], self._buffer[n:]
        self.tokens_consumed += n
        return out


def check_random_access(documents: Any) -> None:
    """Refuse (``ValueError``, one line naming ``shuffle`` and the way on) a documents source that ``shuffle``
    cannot read in a permuted order: one read as a stream, without ``count`` and ``in_order``."""
    if isinstance(documents, Shuffled):
        # it was told to use shuffle=False or local files, while the source was the stdlib with its own order
        raise ValueError(f"shuffle=True: dataset {documents!r} is already read in one seeded order (the stdlib's "
                         "shuffle_seed): two shuffles of the same documents; use one: the source without its "
                         "shuffle_seed (corpus.stdlib(); recipe dataset.shuffle_seed=null) with this stream's "
                         "shuffle_seed (a new order each pass), or no shuffle_seed here (recipe shuffle=False)")
    if getattr(documents, "count", None) is None or not callable(getattr(documents, "in_order", None)):
        raise ValueError(f"shuffle=True: dataset {documents!r} is read as a stream, in order (no random access to its "
                         "documents, e.g. a hub dataset with streaming=True); set shuffle=False, or read the data as a "
                         "map-style dataset (torchtune.datasets.text_completion_dataset with source and column) or "
                         "from local files (torchtune_longshort.data.corpus.local_text)")


def pass_order(count: int, seed: int, epoch: int) -> List[int]:
    """The order in which a shuffled stream reads ``count`` documents in pass ``epoch``: the permutation
    ``torch.utils.data.DistributedSampler(shuffle=True, seed=seed)`` gives one replica after ``set_epoch(epoch)``
    (``torch.randperm`` from a generator seeded ``seed + epoch``), so a torchtune user's ``shuffle: True`` order."""
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(count, generator=generator).tolist()


class DualWindowBatcher:
    """Yield dual-window batches from a :class:`PackedTokenStream` (see module doc).

    Args:
        stream: the packed token stream.
        L: window length (even, >= 4).
        e_range: ``[lo, hi]``, ints or expressions in ``L`` (default ``windows.DEFAULT_E_RANGE``, the paper's).
        batch_size: samples per rank per batch.
        seed: seed of the ``e`` sampler.
        rank, world_size: this process's slice of the global batch of ``batch_size * world_size`` samples.
        ignore_index: label value for positions without a target.
        bos_id: if given, BOS is written over the first token of both windows (``windows.slice_windows``):
            pre-training windows that start like evaluated sequences. Off (``None``) for the alignment loss.

    Each batch is a dict with ``tokens_a``, ``tokens_b``, ``labels_a``, ``labels_b`` (``[batch_size, L]`` int64),
    ``e`` (int), ``step`` (int) and ``data_position`` (the stream position before the batch was read).
    """

    def __init__(
        self,
        stream: PackedTokenStream,
        L: int,
        e_range: Sequence[Bound] = DEFAULT_E_RANGE,
        batch_size: int = 1,
        seed: int = 0,
        rank: int = 0,
        world_size: int = 1,
        ignore_index: int = -100,
        bos_id: Optional[int] = None,
    ):
        if not all(hasattr(stream, m) for m in ("take", "state_dict", "load_state_dict")):
            raise TypeError(f"stream must be a PackedTokenStream (resumable: it keeps the data position), not a "
                            f"{type(stream).__name__}: PackedTokenStream(lambda: iter(documents), tokenize)")
        validate_window_length(L)
        self.e_lo, self.e_hi = resolve_e_range(e_range, L)
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size={batch_size!r} must be an int >= 1")
        check_seed(seed, "seed")
        if not (isinstance(world_size, int) and world_size >= 1 and 0 <= rank < world_size):
            raise ValueError(f"rank={rank}, world_size={world_size}: need 0 <= rank < world_size")
        self.stream = stream
        self.L = L
        self.batch_size = batch_size
        self.rank = rank
        self.world_size = world_size
        self.ignore_index = ignore_index
        self.bos_id = bos_id
        self.seed = seed
        self.generator = torch.Generator().manual_seed(seed)
        self.step = 0

    def state_dict(self) -> Dict[str, Any]:
        return {
            "stream": self.stream.state_dict(),
            "rng": self.generator.get_state(),
            "step": self.step,
            "L": self.L,
            "e_range": [self.e_lo, self.e_hi],
            "global_batch": self.batch_size * self.world_size,
        }

    def load_state_dict(self, state: Dict[str, Any]) -> None:
        if state.get("L", self.L) != self.L \
                or list(state.get("e_range", [self.e_lo, self.e_hi])) != [self.e_lo, self.e_hi]:
            raise ValueError(
                f"cannot resume: saved data state has L={state.get('L')} e_range={state.get('e_range')}, "
                f"this run has L={self.L} e_range={[self.e_lo, self.e_hi]}"
            )
        if state.get("global_batch", self.batch_size * self.world_size) != self.batch_size * self.world_size:
            raise ValueError(
                f"cannot resume: saved global batch {state['global_batch']} != this run's "
                f"{self.batch_size * self.world_size} (batch_size x world_size)"
            )
        self.stream.load_state_dict(state["stream"])
        self.generator.set_state(state["rng"])
        self.step = int(state["step"])

    def sample_e(self) -> int:
        return int(torch.randint(self.e_lo, self.e_hi + 1, (1,), generator=self.generator).item())

    def next_batch(self) -> Dict[str, Any]:
        position = self.stream.position()
        e = self.sample_e()
        n = self.L + e
        global_bsz = self.batch_size * self.world_size
        samples = [self.stream.take(n) for _ in range(global_bsz)]
        mine = samples[self.rank * self.batch_size : (self.rank + 1) * self.batch_size]
        tokens = torch.tensor(mine, dtype=torch.long)
        batch = slice_windows(tokens, self.L, e, self.ignore_index, self.bos_id)
        batch.update(e=e, step=self.step, data_position=position)
        self.step += 1
        return batch

    def __iter__(self) -> Iterator[Dict[str, Any]]:
        while True:
            try:
                yield self.next_batch()
            except StopIteration:
                return

