"""``CLEXRoPE.check_training_length`` at its exact boundary: a hand mutant taking the inner positions' top as
``(seq_len * t - 3) / scale`` for ``(seq_len * t - 2) / scale`` survived every CLEX test (test_rope_clex's sweep draws
no length where the inner top alone decides). The reference is the closed form ``sample_training_positions``'
docstring states: inner positions a subset of the integers in ``(0, seq_len * t - 1)``, the largest ``seq_len * t -
2``, divided by ``scale = max(1, seq_len // L)``; the last position ``seq_len * t // scale - 1``."""

from __future__ import annotations

import pytest
import torch

from torchtune_longshort.rope.clex import CLEXRoPE

L, T_MAX, SEQ_LEN = 512, 2, 1537  # scale 3: the inner top 3072 / 3 = 1024 passes the last position, 1023


def _closed_form_top(seq_len: int, t: int) -> float:
    scale = max(1, seq_len // L)
    return max((seq_len * t - 2) / scale, seq_len * t // scale - 1)


def test_a_length_whose_inner_positions_reach_max_seq_len_exactly_is_refused():
    top = _closed_form_top(SEQ_LEN, T_MAX)
    assert top == 1024 and SEQ_LEN * T_MAX // (SEQ_LEN // L) - 1 == 1023  # the inner top alone decides
    at = CLEXRoPE(16, int(top), original_max_seq_len=L, t_max=T_MAX)  # position 1024 is past max_seq_len=1024
    with pytest.raises(ValueError, match=r"^seq_len=1537: CLEX's training positions reach 1024 at t_max=2 .*past "
                                         r"max_seq_len=1024: make seq_len a multiple of 512 \(e\.g\. 2048\), or set "
                                         r"the model's t_max to 1$"):
        at.check_training_length(SEQ_LEN)
    CLEXRoPE(16, int(top) + 1, original_max_seq_len=L, t_max=T_MAX).check_training_length(SEQ_LEN)  # one more fits
    # the sampler itself reaches that position at t_max (some seed draws the inner top, 3072)
    draws = [float(at._host_training_positions(SEQ_LEN, T_MAX, torch.Generator().manual_seed(s)).max())
             for s in range(4)]
    assert max(draws) == top
