"""Hand mutants of eval/report/build.py that survived the report's tests (mutants21), killed on hand-made lm-eval
results folders. References: ``str.strip`` (a label of blanks names nothing), lm-eval's ``--predict_only`` results
(every task's metric list swapped for lm-eval's ``bypass``), and the docstring of ``SUMMARY_KEYS`` (a summary.json
without all of them is not a report's, so the files it lists are a user's)."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.eval.report.build import build_report
from report_runs import lm_eval_run


def test_a_label_of_blanks_is_an_empty_name(tmp_path):
    runs = [lm_eval_run(tmp_path / "a", 5), lm_eval_run(tmp_path / "b", 5)]
    assert " ".strip() == ""
    with pytest.raises(ValueError, match=r"^--labels ' ,b' holds an empty name: give each run one$"):
        build_report(runs, tmp_path / "out", [" ", "b"])
    assert not (tmp_path / "out").exists()


def _predict_only(d):
    d.mkdir(parents=True)
    data = {"results": {"longshort_ppl": {"bypass,none": 999}},  # lm-eval's placeholder, no score
            "configs": {"longshort_ppl": {"metric_list": [{"metric": "bypass"}]}},
            "config": {"model": "longshort", "model_args": {"pretrained": "/ckpt/a"}, "limit": None}}
    (d / "results_2026-01-01T00-00-00.json").write_text(json.dumps(data))
    return d


def test_two_predict_only_runs_alone_are_refused_as_every_run(tmp_path):
    # `len(outputs_only) == 1` in place of `== len(names)` wrote a report of two runs with no cell
    runs = [_predict_only(tmp_path / "a"), _predict_only(tmp_path / "b")]
    with pytest.raises(ValueError, match=r"^every run given was lm-eval --predict_only \(tasks longshort_ppl: "):
        build_report(runs, tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_a_summary_json_lacking_a_report_key_is_a_users_and_its_files_are_kept(tmp_path):
    # `any(k in summary ...)` in place of `all`: another tool's summary.json with "files" and "runs" was taken for an
    # earlier report's, and the report.md it lists (the user's) was overwritten
    run = lm_eval_run(tmp_path / "a", 5)
    out = tmp_path / "out"
    out.mkdir()
    (out / "report.md").write_text("my notes\n")
    (out / "summary.json").write_text(json.dumps({"files": ["report.md", "summary.json"], "runs": {}}))
    with pytest.raises(FileExistsError, match=r"holds 'report.md', 'summary.json', which no earlier run there wrote"):
        build_report([run], out)
    assert (out / "report.md").read_text() == "my notes\n"
