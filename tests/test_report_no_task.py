"""``longshort-eval-report r --out rep``, ``r`` holding one ``results_<date>.json`` with ``{}`` (a run stopped before
lm-eval wrote a task; ``{"results": {}}``, tasks without a value, a JSON list alike), wrote an empty report, exit 0
(the list: an ``AttributeError`` traceback). Refused now in one line naming the file, exit 2, nothing written; each
file read with json itself (the reference) holds no value; a run with one is reported as before (test_eval_report)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.report.build import main  # noqa: E402

NAME = "results_2026-01-01T00-00-00.000000.json"


def _has_a_value(path):
    data = json.loads(path.read_text())
    results = data.get("results") if isinstance(data, dict) else None
    return any("," in k for m in (results or {}).values() for k in m)


@pytest.mark.parametrize("body", ["{}", "[]", '{"results": {}}', '{"results": {"arc_easy": {"alias": "arc_easy"}}, '
                                  '"configs": {}}'])
def test_a_run_whose_results_hold_no_task_is_refused_naming_the_file(body, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "r").mkdir()
    (tmp_path / "r" / NAME).write_text(body)
    assert not _has_a_value(tmp_path / "r" / NAME)
    with pytest.raises(SystemExit) as ended:
        main(["r", "--out", "rep"])
    assert ended.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"longshort-eval-report: error: results_dir='r': r/{NAME} holds no task with a value (lm-eval "
                   "writes them under 'results', e.g. {\"results\": {\"longshort_ppl\": {\"ppl_4k,none\": ...}}}): "
                   "nothing to report; name the --output_path of a run that scored a task, or leave it out"]
    assert not (tmp_path / "rep").exists()

