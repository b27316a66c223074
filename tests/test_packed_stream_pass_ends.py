"""PackedTokenStream where a pass ends and a resume starts: a state saved right after a pass's last document, a
negative token id, a resume one document in. References: the tokens an uninterrupted stream gives, torch's own
embedding lookup, the source's own reads. Hand mutation testing found each unasked (``docs_consumed > count`` as
``>=``, ``lo < 0`` dropped, the random-access start taken only past one document)."""

import pytest
import torch

from torchtune_longshort.data import PackedTokenStream
from torchtune_longshort.data.document_source import DocumentSource

DOCS = [[1, 2], [3, 4, 5], [6]]  # 6 tokens a pass


def _source(docs, log=None):
    def read(indices):
        for i in indices:
            if log is not None:
                log.append(i)
            yield docs[i]

    def whole():
        if log is not None:
            log.append("start")
        return iter(docs)

    return DocumentSource(whole, "docs", count=len(docs), read=read)


@pytest.mark.parametrize("shuffle_seed", [None, 3])
def test_a_resume_saved_right_after_a_passs_last_document_continues_into_the_next_pass(shuffle_seed):
    """A step that ends on a pass's last token leaves docs_consumed == count (the pass rolls over on the next read):
    its saved state resumes to exactly the tokens an uninterrupted stream gives next."""
    whole = PackedTokenStream(_source(DOCS), shuffle_seed=shuffle_seed)
    whole.take(6)
    state = whole.state_dict()
    assert state["docs_consumed"] == len(DOCS) and state["buffer"] == []
    resumed = PackedTokenStream(_source(DOCS), shuffle_seed=shuffle_seed)
    resumed.load_state_dict(state)
    assert resumed.take(7) == whole.take(7)


def test_a_negative_token_id_is_refused_as_torchs_embedding_refuses_it():
    emb = torch.nn.Embedding(10, 2)
    with pytest.raises(IndexError):
        emb(torch.tensor([-1]))
    with pytest.raises(ValueError, match=r"^token id -1 in document 1 \(epoch 0\) is outside the model vocabulary"):
        PackedTokenStream(lambda: iter([[-1, 2, 3]]), vocab_size=10).take(2)


@pytest.mark.parametrize("consumed", [1, 2])
def test_a_resume_reads_no_document_before_its_position(consumed):
    """The README's resume: the documents consumed before the position are neither read nor tokenized again."""
    first = PackedTokenStream(_source(DOCS))
    first.take([2, 5][consumed - 1])
    assert first.docs_consumed == consumed
    log = []
    resumed = PackedTokenStream(_source(DOCS, log))
    resumed.load_state_dict(first.state_dict())
    assert resumed.take(2) == first.take(2)
    assert log[0] == consumed  # read from its position: no document before it, no read from the start
