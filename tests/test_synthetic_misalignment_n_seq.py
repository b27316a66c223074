"""scalar_misalignment refuses a count of no sequence by name (a ValueError naming n_seq), not by torch's error on an
empty batch."""

import pytest
import torch

from torchtune_longshort.synthetic.misalignment import scalar_misalignment


class _Zero(torch.nn.Module):
    def forward(self, tokens, read_pos, position_ids=None):
        return torch.zeros(tokens.shape[0], dtype=torch.float64)


def test_no_sequence_is_refused_by_name():
    assert scalar_misalignment(_Zero(), "sum", L=4, n_seq=1)["model_f"] == 0.0  # one sequence is enough
    with pytest.raises(ValueError, match="n_seq=0 must be >= 1"):
        scalar_misalignment(_Zero(), "sum", L=4, n_seq=0)
