"""RunConfig's bounds at their edges: a test range equal to the training range contains it (valid), and the seed's
bound is where torch's own seeding stops working for the run's three generators (seed, 10_000 + seed, 20_000 + seed)."""

import pytest
import torch

from torchtune_longshort.synthetic.train import RunConfig


def test_a_test_range_equal_to_the_training_range_is_valid():
    RunConfig(l_train=4, l_test=4).validate()
    with pytest.raises(ValueError, match="l_test=3 < l_train=4"):
        RunConfig(l_train=4, l_test=3).validate()


def _torch_seeds_all(seed):
    try:
        for offset in (0, 10_000, 20_000):
            torch.Generator().manual_seed(seed + offset)
    except (RuntimeError, ValueError, OverflowError):
        return False
    return True


@pytest.mark.parametrize("seed", [2**63 - 1, 2**64 - 1])
def test_a_seed_is_accepted_only_where_torch_can_seed_the_runs_generators(seed):
    if _torch_seeds_all(seed):
        RunConfig(seed=seed).validate()
    else:
        with pytest.raises(ValueError, match=f"seed={seed} must be in"):
            RunConfig(seed=seed).validate()
