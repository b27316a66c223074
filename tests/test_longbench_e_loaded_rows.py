"""load_longbench_e on LongBench's own JSONL: the buckets taken in turn, and a sample with no answer refused.

Two hand mutants of longbench_e.task._with_longbench_fields survived test_longbench_e and test_longbench_e_bad_lines
(mutants11): the rows kept in the file's order (lm-eval's --limit 2 then scored the 0-4k bucket only, where its
comment says --limit N keeps every bucket), and ``"answers": []`` let through (scored 0 as max over no answer, where
the refusal names the field). The references: the bucket order written out by hand from LongBench's thresholds
(0-4k, 4-8k, 8k+ words), and the file's own line.
"""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
from torchtune_longshort.eval.tasks.longbench_e.task import load_longbench_e


def _write(folder, rows):
    lines = [json.dumps({"input": f"q{i}", "context": "c", "answers": ["a"], "all_classes": None, "_id": str(i), **r})
             for i, r in enumerate(rows)]
    (folder / "qasper_e.jsonl").write_text("\n".join(lines) + "\n")


def _load(folder):
    return load_longbench_e("qasper_e", str(folder), longbench_e_missing="error")["test"]


def test_the_buckets_are_taken_in_turn(tmp_path):
    _write(tmp_path, [{"length": n} for n in (10, 20, 30, 5000, 5001, 9000)])
    # 0-4k: q0 q1 q2; 4-8k: q3 q4; 8k+: q5 -> one of each in turn
    assert list(_load(tmp_path)["input"]) == ["q0", "q3", "q5", "q1", "q4", "q2"]


def test_a_sample_with_no_answer_is_refused_naming_the_field(tmp_path):
    _write(tmp_path, [{"length": 10}, {"length": 20, "answers": []}])
    with pytest.raises(TaskDataError, match=r"qasper_e.jsonl:2: field 'answers' is \[\], expected a non-empty list"):
        _load(tmp_path)
