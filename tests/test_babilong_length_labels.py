"""BABILong's max_seq_lengths as load_babilong reads it (eval.tasks.babilong.task.parse_lengths): a comma list or a
list of BABILong's length labels, each stripped, blanks dropped, at least one. Two hand mutants survived every
BABILong test (mutants12): the items not stripped ('0k, 4k' refused) and no label at all let through (then an
IndexError in load_babilong). The reference: the grammar written naively below, over haystack.LENGTHS."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.tasks.babilong import task as bl
from torchtune_longshort.eval.tasks.babilong.haystack import LENGTHS


def _naive(value):
    items = value.split(",") if isinstance(value, str) else list(value)
    items = [str(i).strip() for i in items]
    items = [i for i in items if i]
    if not items or any(i not in LENGTHS for i in items):
        return None
    return items


@pytest.mark.parametrize("value", ["0k, 4k", " 1k ", ["2k", " 8k "], "0k,,1k,", "", ",", " ", [], ["4k", ""],
                                   "0k,5k", ["0K"]])
def test_parse_lengths_reads_the_labels_as_written(value):
    want = _naive(value)
    if want is None:
        with pytest.raises(ValueError, match=r"max_seq_lengths=.* not accepted; accepted: comma list of"):
            bl.parse_lengths(value)
    else:
        assert bl.parse_lengths(value) == want
