"""A corpus whose every pass starts with a document of no tokens (an empty one, a record skipped with
``skip_bad_records=True``), smaller than one step's ``L + e`` tokens: the take spans several passes, and it was refused
as "the corpus tokenizes to no tokens at all" at the second pass start although every pass has tokens. Reference:
the documents' tokens concatenated by hand. Hand mutation testing found it (``passes_without_tokens > 1`` as ``> 0``
passed every test)."""

import pytest

from torchtune_longshort.data import PackedTokenStream
from torchtune_longshort.data.text_files import SkippedRecord


@pytest.mark.parametrize("first", [[], SkippedRecord("record 0: not JSON")])
def test_a_pass_whose_first_document_has_no_tokens_is_read_past_in_a_take_over_several_passes(first):
    """A first document with no tokens (an empty one, a skipped record) at the start of each pass is no corpus
    without tokens: a take longer than a pass (L + e above a small corpus's tokens) packs the passes' tokens."""
    assert PackedTokenStream(lambda: iter([first, [7, 8, 9]])).take(7) == [7, 8, 9, 7, 8, 9, 7]
    stream = PackedTokenStream(lambda: iter([first, [7, 8, 9]]))
    assert stream.take(3) == [7, 8, 9]
    assert stream.take(4) == [7, 8, 9, 7]


def test_a_corpus_of_no_tokens_is_still_refused():
    with pytest.raises(ValueError, match="^the corpus tokenizes to no tokens at all$"):
        PackedTokenStream(lambda: iter([[], SkippedRecord("record 1: bad")])).take(1)
