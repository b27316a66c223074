"""DualWindowBatcher / PackedTokenStream across ranks and resumes, where hand mutation testing found gaps: a rank
outside ``[0, world_size)`` (torch.distributed's own rank range), a resume onto another split of the same global
batch (the README: the same global batch trains the same tokens on any process count), a shuffled resume in the
middle of a later pass. References: the batches and tokens an uninterrupted single-process run gives."""

import pytest
import torch

from torchtune_longshort.data import DualWindowBatcher, PackedTokenStream
from torchtune_longshort.data.document_source import DocumentSource

DOCS = [[i, i + 1, i + 2] for i in range(0, 60, 3)]  # 20 documents of 3 tokens


def _source():
    return DocumentSource(lambda: iter(DOCS), "docs", count=len(DOCS), read=lambda idx: (DOCS[i] for i in idx))


@pytest.mark.parametrize("rank, world_size", [(2, 2), (-1, 2), (1, 1)])
def test_a_rank_outside_the_world_is_refused(rank, world_size):
    assert not 0 <= rank < world_size  # torch.distributed's ranks are 0 .. world_size - 1
    with pytest.raises(ValueError, match=rf"^rank={rank}, world_size={world_size}: need 0 <= rank < world_size$"):
        DualWindowBatcher(PackedTokenStream(lambda: iter(DOCS)), L=4, e_range=[1, 1], rank=rank,
                          world_size=world_size)


def test_a_resume_onto_two_ranks_of_the_same_global_batch_continues_the_single_process_batches():
    one = DualWindowBatcher(PackedTokenStream(lambda: iter(DOCS)), L=4, e_range=[1, 2], batch_size=2)
    one.next_batch()
    state = one.state_dict()
    expected = one.next_batch()
    for rank in (0, 1):
        part = DualWindowBatcher(PackedTokenStream(lambda: iter(DOCS)), L=4, e_range=[1, 2], batch_size=1,
                                 rank=rank, world_size=2)
        part.load_state_dict(state)
        got = part.next_batch()
        assert got["e"] == expected["e"]
        assert torch.equal(got["tokens_a"], expected["tokens_a"][rank : rank + 1])


def test_a_shuffled_resume_in_the_middle_of_a_later_pass_gives_the_uninterrupted_tokens():
    whole = PackedTokenStream(_source(), shuffle_seed=5)
    whole.take(60 + 7 * 3 + 1)  # the whole first pass, 7 documents and one token of the second
    state = whole.state_dict()
    assert state["epoch"] == 1 and state["docs_consumed"] == 8
    resumed = PackedTokenStream(_source(), shuffle_seed=5)
    resumed.load_state_dict(state)
    assert resumed.take(40) == whole.take(40)
