"""PackedTokenStream / DualWindowBatcher at their edges: max_epochs passes, a corpus of no documents, empty
documents among others, skipped records and the global batch across a resume. References: the documents' own
tokens concatenated, counted by hand."""

import threading

import pytest

from torchtune_longshort.data import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.data.text_files import SkippedRecord


def _drain(stream):
    out = []
    try:
        while True:
            out += stream.take(1)
    except StopIteration:
        return out


def test_max_epochs_reads_that_many_passes_of_the_documents():
    docs = [[1, 2, 3], [4, 5]]
    assert _drain(PackedTokenStream(lambda: iter(docs), max_epochs=2)) == [1, 2, 3, 4, 5] * 2


def test_empty_documents_among_others_are_packed_past_and_a_corpus_of_none_is_refused():
    docs = [[1], [], [], [2, 3]]
    assert PackedTokenStream(lambda: iter(docs)).take(3) == [1, 2, 3]
    with pytest.raises(ValueError, match="^the corpus tokenizes to no tokens at all$"):
        PackedTokenStream(lambda: iter([[], []])).take(1)
    said = []

    def take_from_nothing():  # looped forever where 'yielded no documents' was lost: a thread, to fail, not hang
        try:
            PackedTokenStream(lambda: iter([])).take(1)
        except ValueError as e:
            said.append(str(e))

    thread = threading.Thread(target=take_from_nothing, daemon=True)
    thread.start()
    thread.join(5)
    assert said == ["the corpus yielded no documents"]


def test_skipped_records_are_counted_across_a_resume():
    docs = [[1, 2], SkippedRecord("record 2: bad"), [3, 4], SkippedRecord("record 4: bad"), [5, 6]]
    first = PackedTokenStream(lambda: iter(docs))
    first.take(3)  # reads records 1 to 3, one of them skipped
    resumed = PackedTokenStream(lambda: iter(docs))
    resumed.load_state_dict(first.state_dict())
    assert resumed.take(3) == [4, 5, 6]
    assert resumed.records_skipped == 2  # as one uninterrupted stream counts
    assert resumed.new_skips() == ["record 4: bad"]


def test_a_resume_with_another_global_batch_is_refused():
    docs = [[i] * 7 for i in range(1, 30)]
    saved = DualWindowBatcher(PackedTokenStream(lambda: iter(docs)), L=8, batch_size=2)
    saved.next_batch()
    other = DualWindowBatcher(PackedTokenStream(lambda: iter(docs)), L=8, batch_size=3)
    with pytest.raises(ValueError, match=r"^cannot resume: saved global batch 2 != this run's 3 "):
        other.load_state_dict(saved.state_dict())


def test_a_token_id_equal_to_the_vocabulary_size_is_refused():
    vocab_size = 5  # ids 0..4: range(vocab_size)
    assert PackedTokenStream(lambda: iter([[0, 4]]), vocab_size=vocab_size).take(2) == [0, 4]
    with pytest.raises(ValueError, match=r"^token id 5 in document 1 \(epoch 0\) is outside the model vocabulary "
                                         r"\[0, 5\)"):
        PackedTokenStream(lambda: iter([[1, 5]]), vocab_size=vocab_size).take(2)
