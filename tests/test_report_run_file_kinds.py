"""Which of an lm-eval run's files the report takes for results (``eval/report/run_files.py``), against lm-eval's own
formats: a ``samples_<task>_<date>.jsonl`` (JSON lines, the one ``lm_eval.utils.get_file_task_name`` reads a task
from) is no results file, and a task entry with no ``<metric>,<filter>`` key (lm-eval's ``"<metric>,<filter>"``
naming, e.g. ``acc,none``) scored nothing. Hand mutation testing found both unasked: taking any lm-eval file name for
a results file, and any key for a score, passed every test of the module."""

from __future__ import annotations

import json

import pytest
from lm_eval.utils import get_file_task_name

from torchtune_longshort.eval.report.run_files import check_scored, results_files

DATE = "2026-03-01T10-00-00.000002"


def test_a_samples_file_given_as_a_run_is_refused(tmp_path):
    f = tmp_path / f"samples_longshort_ppl_{DATE}.jsonl"
    f.write_text(json.dumps({"doc_id": 0}) + "\n")
    assert get_file_task_name(f.name) == "longshort_ppl"  # lm-eval's samples file, not its results
    with pytest.raises(ValueError, match=r"is a file but not an lm-eval results file"):
        results_files(f)


def test_a_run_whose_task_holds_no_metric_filter_key_scored_nothing(tmp_path):
    entry = {"alias": "longshort_ppl", "samples": 4}
    assert not [k for k in entry if len(k.split(",")) == 2]  # no "<metric>,<filter>" key
    (tmp_path / f"results_{DATE}.json").write_text(json.dumps({"results": {"longshort_ppl": entry}, "configs": {}}))
    with pytest.raises(ValueError, match=r"holds no task with a value"):
        check_scored(tmp_path)
    entry["ppl_4k,none"] = 3.5
    (tmp_path / f"results_{DATE}.json").write_text(json.dumps({"results": {"longshort_ppl": entry}, "configs": {}}))
    check_scored(tmp_path)
