"""A batcher's ``ignore_index`` of one's own reaches both windows' last label, and a token id equal to the vocabulary
size is refused (ids lie in ``[0, vocab_size)``): the reference is the packed token list itself.

The other tests built every batch with -100 and vocabularies far from their tokens: window B's labels made with
-100 whatever the batcher was given, or an id of exactly ``vocab_size`` let through, passed them (hand mutants).
"""

import pytest

from torchtune_longshort.data import DualWindowBatcher, PackedTokenStream

L, IGN = 8, -1


def test_both_windows_end_with_the_batchers_own_ignore_value():
    tokens = list(range(3, 3 + 4 * L))
    batcher = DualWindowBatcher(PackedTokenStream(lambda: iter([tokens])), L=L, e_range=(3, 3), ignore_index=IGN)
    batch = batcher.next_batch()
    sample = tokens[: L + 3]
    assert batch["labels_a"][0].tolist() == sample[1:L] + [IGN]
    assert batch["labels_b"][0].tolist() == sample[3 + 1 : 3 + L] + [IGN]


@pytest.mark.parametrize("top, refused", [(9, False), (10, True)])
def test_a_token_id_of_vocab_size_is_outside_the_vocabulary(top, refused):
    stream = PackedTokenStream(lambda: iter([[0, 1, top] * L]), vocab_size=10)
    if refused:
        with pytest.raises(ValueError, match=f"token id {top} .* outside the model vocabulary"):
            stream.take(L)
    else:
        assert stream.take(3) == [0, 1, top]
