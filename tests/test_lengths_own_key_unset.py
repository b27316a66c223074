"""A task's own ``<prefix>_max_seq_lengths`` left empty (``""`` or ``[]``, as a shell-built ``--metadata`` may give
it) counts as unset: the task sweeps the shared ``max_seq_lengths`` ("1k = 1024 tokens"), as README.md's length
grammar reads it."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.tasks.common.lengths import lengths_from_metadata, lengths_source


@pytest.mark.parametrize("empty", ["", []])
def test_an_empty_own_lengths_key_falls_back_to_the_shared_one(empty):
    metadata = {"max_seq_lengths": "2k,512", "ppl_max_seq_lengths": empty}
    assert lengths_source(metadata, "ppl") == "max_seq_lengths"
    assert lengths_from_metadata(metadata, "ppl") == [2 * 1024, 512]
    assert lengths_from_metadata({**metadata, "ppl_max_seq_lengths": "1k"}, "ppl") == [1024]  # set: its own
