"""The synthetic tasks' length ranges at their bounds (paper Sec. 3: training lengths uniform in [l_min, l_train],
test lengths every value l_min..l_test, ``per_length`` times each): a range of one length and one sequence per length
are valid draws, not refusals."""

import pytest
import torch

from torchtune_longshort.synthetic.tasks import eval_lengths, train_lengths


def test_a_training_range_of_one_length_draws_that_length():
    g = torch.Generator().manual_seed(0)
    assert train_lengths(6, 3, g, l_min=3).tolist() == [3] * 6  # U[3, 3] has one value
    with pytest.raises(ValueError, match="l_train=2 must be >= l_min=3"):
        train_lengths(6, 2, g, l_min=3)


def test_one_sequence_per_test_length_is_every_length_once():
    assert eval_lengths(5, 1).tolist() == list(range(1, 6))
    assert eval_lengths(5, 1, l_min=4).tolist() == [4, 5]
    with pytest.raises(ValueError, match="per_length=0 must be >= 1"):
        eval_lengths(5, 0)
