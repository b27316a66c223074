"""``PackedTokenStream.new_skips`` hands a logger the first ``SKIPS_KEPT`` messages of the records skipped since the
last call (its docstring), while ``records_skipped`` counts every one. Hand mutation testing (mutants21) found
keeping one message more (``<=``) passing test_packed_stream_edges and test_corpus. Reference: the documents listed
here, counted by hand."""

from torchtune_longshort.data import PackedTokenStream
from torchtune_longshort.data.text_files import SkippedRecord


def test_new_skips_keeps_the_first_skips_kept_messages_and_counts_them_all():
    kept = PackedTokenStream.SKIPS_KEPT
    skipped = [SkippedRecord(f"record {i}: bad") for i in range(kept + 5)]
    stream = PackedTokenStream(lambda: iter(skipped + [[7, 8]]))
    assert stream.take(2) == [7, 8]
    assert stream.records_skipped == len(skipped)
    assert stream.new_skips() == [s.message for s in skipped[:kept]]
    assert stream.new_skips() == []  # handed over once, then forgotten
