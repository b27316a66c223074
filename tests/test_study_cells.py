"""A study table cell tells "the run failed" (—) from "the run succeeded but the task could not run there" (n/a,
with the reason as a numbered note of its table), for records of this version (the results file's ``not_scored``,
kept by the runner with the group's members) and for records written before (``error`` entries of the results)."""

from __future__ import annotations

import math

from torchtune_longshort.study.records import not_scored_reasons
from torchtune_longshort.study.tables import table_cell as _cell

NEW = {"status": "ok", "results": {"longshort_babilong": {"acc_0k": math.nan}, "longshort_babilong_qa1": {}},
       "group_subtasks": {"longshort_babilong": ["longshort_babilong_qa1", "longshort_babilong_qa2"]},
       "not_scored": {"longshort_babilong_qa1": "longshort_babilong_qa1: a generate_until prompt longer than the 496 "
                                                "tokens --model longshort can take",
                      "longshort_babilong_qa2": "longshort_babilong_qa2: length 0k: BABILong data file not found"}}
# as the committed docs/study records were written: old names, the reason as an `error` metric of each member
OLD = {"status": "ok", "results": {"babilong_longshort": {"acc": math.nan, "acc_0k": math.nan, "missing_data": 1.0},
                                   "babilong_qa1": {"acc": math.nan, "error": "babilong_qa1: prompt of 577 tokens"},
                                   "babilong_qa2": {"missing_data": 1.0, "error": "babilong_qa2: file not found"},
                                   "long_ppl": {"ppl_512": 40.0}}}


def test_reasons_of_a_group_come_from_its_members():
    assert [r.split(":")[0] for r in not_scored_reasons(NEW, "longshort_babilong")] == [
        "longshort_babilong_qa1", "longshort_babilong_qa2"]
    assert not_scored_reasons(OLD, "longshort_babilong") == ["babilong_qa1: prompt of 577 tokens",
                                                             "babilong_qa2: file not found"]
    assert not_scored_reasons(OLD, "longshort_ppl") == []


def test_failed_run_reads_dash_and_a_task_that_could_not_run_reads_na_with_its_note():
    recs = {"ok_new": NEW, "ok_old": OLD, "failed": {"status": "failed", "error": "recipe exited with 1"},
            "fine": {"status": "ok", "results": {"longshort_babilong": {"acc_0k": 0.5}}}}
    reasons = []
    failed = _cell(recs, ["failed"], "longshort_babilong", "acc_0k", reasons, "0k")
    assert failed["text"] == "—" and reasons == [] and failed["why_empty"].startswith("run failed")
    cell = _cell(recs, ["ok_old"], "longshort_babilong", "acc_0k", reasons, "0k")
    assert cell["text"] == "n/a (note 1, 2)" and reasons == OLD_REASONS and cell["not_scored"]["runs"] == ["ok_old"]
    cell = _cell(recs, ["ok_new"], "longshort_babilong", "acc_0k", reasons, "0k")
    assert cell["text"] == "n/a (note 3, 4)" and len(reasons) == 4  # notes numbered across the table
    mixed = _cell(recs, ["fine", "ok_old", "failed"], "longshort_babilong", "acc_0k", reasons, "0k")
    assert mixed["text"] == "0.5 (1/3 runs; note 1, 2; 1 failed)" and mixed["mean"] == 0.5
    assert _cell(recs, ["ok_old"], "longshort_ppl", "ppl_512", reasons, "512")["text"] == "40"  # a former name is read


OLD_REASONS = ["babilong_qa1: prompt of 577 tokens", "babilong_qa2: file not found"]


def test_a_cell_missing_a_failed_or_unrun_seed_says_so():
    """Three seeds, one failed: the cell read '41 ± 1.414', the mean and sd of two runs, beside a row linking
    three; it says 2/3 runs and why now (the numbers unchanged: mean 41, sample sd sqrt(2))."""
    ppl = lambda v: {"status": "ok", "results": {"longshort_ppl": {"ppl_512": v}}}  # noqa: E731
    recs = {"s0": ppl(40.0), "s1": ppl(42.0), "s2": {"status": "failed", "error": "recipe exited with 1"}}
    cell = _cell(recs, ["s0", "s1", "s2"], "longshort_ppl", "ppl_512", [], "512")
    assert (cell["mean"], cell["sd"], cell["n"]) == (41.0, math.sqrt(2), 2)
    assert cell["text"] == "41 ± 1.414 (2/3 runs; 1 failed)"
    cell = _cell(recs, ["s0", "s1", "s3"], "longshort_ppl", "ppl_512", [], "512")  # s3 has no record: not run
    assert cell["text"] == "41 ± 1.414 (2/3 runs; 1 not run)"
    assert _cell(recs, ["s0", "s1"], "longshort_ppl", "ppl_512", [], "512")["text"] == "41 ± 1.414"
