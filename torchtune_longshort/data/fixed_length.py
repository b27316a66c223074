"""A validation set: the first sequences of exactly ``seq_len`` tokens packed from a document source (a
:mod:`~torchtune_longshort.data.corpus` callable), read once (the recipe's validation, ``longshort-misalignment``)."""

from __future__ import annotations

import logging
from typing import Callable, List, Optional

from torchtune_longshort.data.corpus import Documents
from torchtune_longshort.data.dual_window import PackedTokenStream
from torchtune_longshort.data.text_files import DataRecordError
from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.plural import counted

log = logging.getLogger(__name__)


class TooFewSequences(ValueError):
    """:func:`fixed_length_sequences`: the source ran out before the sequences asked for."""


def counted_fixed_length_sequences(
    documents: Documents,
    tokenize: Callable[[str], List[int]],
    seq_len: int,
    num_sequences: int,
    vocab_size: Optional[int] = None,
    where: str = "documents",
):
    """``(sequences, records_skipped)``: :func:`fixed_length_sequences` and how many unreadable records the source
    skipped on the way (``skip_bad_records``), for results that record it.

    A validation set: the first ``num_sequences`` packed sequences of exactly ``seq_len`` tokens
    (``[num_sequences, seq_len]`` int64), e.g. 8192-token sequences as the paper's validation sets.

    Raises :class:`TooFewSequences` naming the counts when the source runs out (it is read once, never cycled).
    ``where``: how the user names the source (its other errors and its skipped records are named by it).
    """
    import torch

    if not isinstance(seq_len, int) or seq_len < 2 or not isinstance(num_sequences, int) or num_sequences < 1:
        raise ValueError(f"validation: seq_len={seq_len!r} must be an int >= 2 and num_sequences={num_sequences!r} "
                         ">= 1")
    stream = PackedTokenStream(documents, tokenize=tokenize, vocab_size=vocab_size, max_epochs=1)
    rows = []
    for i in range(num_sequences):
        try:
            rows.append(stream.take(seq_len))
        except StopIteration:
            raise TooFewSequences(f"the source {documents!r} holds only {i} sequences of {seq_len} tokens; "
                                  f"{num_sequences} were asked for") from None
        except DataRecordError:
            raise
        except ValueError as e:  # no documents, ids past the model's vocabulary: named by the source's setting
            raise ValueError(f"{where}: {e}") from None
    if stream.records_skipped and launched_rank() == 0:  # every process of a launch reads the same: said once
        log.warning("%s: skipped %s, first: %s", where, counted(stream.records_skipped, "unreadable record"),
                    stream.new_skips()[0])
    return torch.tensor(rows, dtype=torch.long), stream.records_skipped


def fixed_length_sequences(documents: Documents, tokenize: Callable[[str], List[int]], seq_len: int,
                           num_sequences: int, vocab_size: Optional[int] = None, where: str = "documents"):
    """A validation set (``[num_sequences, seq_len]`` int64); see :func:`counted_fixed_length_sequences`."""
    return counted_fixed_length_sequences(documents, tokenize, seq_len, num_sequences, vocab_size, where)[0]
