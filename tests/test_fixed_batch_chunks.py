"""A fixed ``batch_size`` cuts the request list (longest first) into the batches lm-eval's ``hf`` cuts it into: its
``Collator.get_batched(n=batch_size)``, i.e. ``lm_eval.models.utils.chunks(requests, n=batch_size)``."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("lm_eval")


@pytest.mark.parametrize("size", [1, 2, 3, 7, 8])
def test_fixed_batches_are_lm_evals_chunks(size):
    from lm_eval.models.utils import chunks

    from torchtune_longshort.eval.model.batch_size import BatchPlan

    ran = []
    plan = BatchPlan(size, None, torch.device("cpu"))
    plan.run(torch.nn.Linear(1, 1), list(range(7)), lambda i: 1, lambda c: ran.append(list(c)), lambda *a: None,
             lambda c: None)
    assert ran == list(chunks(range(7), n=size))
