"""``--metadata '{"passkey_depths": "0,50,100"}'`` was refused ("expected a list of percentages in [0, 100], e.g.
[0, 50, 100]") while ``max_seq_lengths`` takes the comma string; the list-valued keys now read the same forms through
one parser (``lengths.list_items``). The reference: ``parse_lengths``, ``max_seq_lengths``' own reader, given the
same value (0, 50 and 100 are token counts as well as percentages)."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.tasks import check_metadata_values
from torchtune_longshort.eval.tasks.common.lengths import parse_lengths
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

FORMS = ("0,50,100", " 0, 50 ,100,", [0, 50, 100], ["0", "50", "100"], (0, 50, 100), 50, "50")


@pytest.mark.parametrize("value", FORMS, ids=repr)
def test_passkey_depths_takes_every_form_max_seq_lengths_takes(value):
    check_metadata_values({"max_seq_lengths": value, "passkey_depths": value})
    from torchtune_longshort.eval.tasks.common.lengths import percentages

    assert percentages(value) == parse_lengths(value)


@pytest.mark.parametrize("value", ["0,150", "a,50", [0, -1], [True], "50%"], ids=repr)
def test_a_value_that_is_no_percentages_is_refused_naming_both_forms(value):
    with pytest.raises(TaskDataError) as refused:
        check_metadata_values({"passkey_depths": value})
    assert str(refused.value) == (f"passkey_depths={value!r}: expected percentages in [0, 100]: a list or a comma "
                                  "list, e.g. [0, 50, 100] or \"0,50,100\"")


def test_the_passkey_task_builds_the_same_depths_from_either_form():
    pytest.importorskip("lm_eval")
    from torchtune_longshort.eval.tasks.passkey.task import _sample_settings

    assert _sample_settings({"passkey_depths": "0,50,100"}) == _sample_settings({"passkey_depths": [0, 50, 100]})
    assert _sample_settings({"passkey_depths": "0,50,100"})["depths"] == parse_lengths("0,50,100")
