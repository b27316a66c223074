"""A local BABILong row whose target is no label of its task (``"the garage"`` for QA1) was loaded and scored 0
whatever the model answered: BABILong's answer check finds only the task's labels in an output. Such a row is
refused now, naming its file, line and field, and the length scores NaN with that reason. The reference is
``ref_compare_answers`` with BABILong's own label sets (test_babilong_answers, from booydar/babilong's metrics.py):
the row's own target, answered word for word, is not counted right."""

from __future__ import annotations

import json

import pytest

from test_babilong_answers import OFFICIAL_LABELS, ref_compare_answers
from torchtune_longshort.eval.tasks.babilong.task import load_babilong
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

GOOD = {"qa1": {"input": "Mary went to the kitchen.", "question": "Where is Mary?", "target": "kitchen"},
        "qa5": {"input": "Fred gave the milk to Bill.", "question": "What did Fred give?", "target": "milk"}}


@pytest.mark.parametrize("qa, target", [("qa1", "the garage"), ("qa5", "apple, milk"), ("qa1", "")])
def test_a_row_whose_target_no_answer_can_match_is_refused_naming_its_line(tmp_path, qa, target):
    bad = {**GOOD[qa], "target": target}
    assert not ref_compare_answers(target, target, bad["question"], OFFICIAL_LABELS[qa])  # even the exact answer
    (tmp_path / "0k").mkdir()
    lines = [json.dumps(GOOD[qa]), "", json.dumps(bad)]  # a blank line before it, as the line count must see
    (tmp_path / "0k" / f"{qa}.jsonl").write_text("\n".join(lines) + "\n")
    line = lines.index(json.dumps(bad)) + 1
    with pytest.raises(TaskDataError, match=rf"{qa}.jsonl:{line}: target={target!r} holds") as e:
        load_babilong(qa, "0k", str(tmp_path), babilong_missing="error")
    assert "\n" not in str(e.value)
    row = load_babilong(qa, "0k", str(tmp_path))[qa][0]  # the default: that length unscored, with the reason
    assert row["input"] == "" and f"{qa}.jsonl:{line}" in json.dumps(row)


@pytest.mark.parametrize("qa, target", [("qa1", "Kitchen"), ("qa5", "apple,milk")])
def test_a_target_the_check_can_count_right_is_loaded(tmp_path, qa, target):
    assert ref_compare_answers(target, target, "Who?", OFFICIAL_LABELS[qa])
    (tmp_path / "0k").mkdir()
    (tmp_path / "0k" / f"{qa}.jsonl").write_text(json.dumps({**GOOD[qa], "target": target}) + "\n")
    assert load_babilong(qa, "0k", str(tmp_path), babilong_missing="error")[qa]["target"] == [target]
