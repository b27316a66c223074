"""How many sequences ``fixed_length_samples`` cuts, and from which documents, against its documented rules with a
one-token-per-character tokenizer (every slice round-trips): exactly ``num_samples`` even when one document could
give more (``chunks_per_doc``), only the first ``max_docs`` documents read, and no sequence shorter than two tokens
(one token is no next-token prediction: nothing to score)."""

from __future__ import annotations

import pytest
from test_joined_documents import CharTokenizer

from torchtune_longshort.eval.tasks.common.token_sequences import TaskDataError, fixed_length_samples


def test_exactly_num_samples_even_where_one_document_holds_more_chunks():
    text = "abcdefghijklmnopqrstuvwxyz"
    got = fixed_length_samples([text], CharTokenizer(), 5, num_samples=2, chunks_per_doc=4)
    assert [s.text for s in got] == [text[0:5], text[5:10]]  # the first two of the document's four chunks


def test_only_the_first_max_docs_documents_are_read():
    docs = ["aaaa", "bbbb", "cccc"]
    assert [s.text for s in fixed_length_samples(docs, CharTokenizer(), 4, 2, max_docs=2)] == docs[:2]
    with pytest.raises(TaskDataError, match="only 2 of num_samples=3"):
        fixed_length_samples(docs, CharTokenizer(), 4, 3, max_docs=2)


def test_a_sequence_holds_at_least_one_next_token_prediction():
    assert [s.token_ids for s in fixed_length_samples(["ab"], CharTokenizer(), 2, 1)] == [[ord("a"), ord("b")]]
    with pytest.raises(TaskDataError, match="length=1"):
        fixed_length_samples(["ab"], CharTokenizer(), 1, 1)
