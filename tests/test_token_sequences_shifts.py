"""Hand mutants of eval/tasks/common/token_sequences that survived (mutants41): one round-trip try fewer than
documented, a chunk with no round-tripping offset skipped by one token instead of ``length``, ``max_docs`` ignored
when documents are joined, and a second joined stream cut for every sample asked instead of the ones still missing.
The reference: a naive cut written here by the documented rules, over a tokenizer whose '~' never round-trips (it
decodes to nothing, as a skipped special token does)."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.tasks.common.token_sequences import (
    JOIN_SEPARATOR, ROUND_TRIP_SHIFTS, TaskDataError, fixed_length_samples)


class TildeTokenizer:
    """One token per character; '~' decodes to nothing, so a chunk holding it never re-encodes to its ids."""

    def encode(self, text):
        return [ord(c) for c in text]

    def decode(self, ids):
        return "".join(chr(i) for i in ids if chr(i) != "~")


def _naive_starts(text, length, limit):
    """Starts of the chunks of one document by the docstring's rules: from the start, each at the first of
    ``ROUND_TRIP_SHIFTS`` offsets whose slice round-trips, the next after it; none found: ``length`` tokens on."""
    starts, start = [], 0
    while len(starts) < limit and start + length <= len(text):
        ok = [s for s in range(start, start + ROUND_TRIP_SHIFTS)
              if s + length <= len(text) and "~" not in text[s:s + length]]
        if ok:
            starts.append(ok[0])
            start = ok[0] + length
        else:
            start += length
    return starts


@pytest.mark.parametrize("tildes", [ROUND_TRIP_SHIFTS - 1, ROUND_TRIP_SHIFTS, ROUND_TRIP_SHIFTS + 3])
def test_round_trip_shifts_and_the_skip_follow_the_documented_rules(tildes):
    length = ROUND_TRIP_SHIFTS + 4
    text = "~" * tildes + "a" * (3 * length) + "~" * 40
    want = _naive_starts(text, length, 2)
    assert len(want) == 2
    got = fixed_length_samples([text], TildeTokenizer(), length, 2, chunks_per_doc=2)
    assert [s.start for s in got] == want
    assert all(s.text == text[s.start:s.start + length] for s in got)


def test_joined_documents_stop_at_max_docs():
    docs = [f"document {i} " * 3 for i in range(20)]
    got = fixed_length_samples(docs, TildeTokenizer(), 10, 2, join_documents=True, max_docs=3)
    stream = JOIN_SEPARATOR.join(docs[:3])
    assert [s.text for s in got] == [stream[0:10], stream[10:20]]
    room = len(stream) // 10
    with pytest.raises(TaskDataError, match=r"\(3 documents"):
        fixed_length_samples(docs, TildeTokenizer(), 10, room + 1, join_documents=True, max_docs=3)


def test_a_second_joined_stream_gives_only_the_samples_still_missing():
    # the first stream (one document) gives one sequence, its '~' the rest; the second gives the one missing
    docs = ["b" * 10 + "~" * 300, "a" * 300]
    got = fixed_length_samples(docs, TildeTokenizer(), 10, 2, join_documents=True)
    assert [(s.doc_index, s.start, s.text) for s in got] == [(0, 0, "b" * 10), (1, 0, "a" * 10)]
