"""``longshort-eval-report res_a res_b --out res_a`` (or ``--out res_a/report``) wrote the report into a results
folder it read; refused before anything is written, naming both. The reference: the folders' listing before and
after."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _results(folder: Path):
    run = folder / "hf__model"
    run.mkdir(parents=True)
    (run / "results_2026-01-01T00-00-00.json").write_text(json.dumps({
        "results": {"longshort_ppl": {"alias": "longshort_ppl", "ppl_64,none": 10.0}},
        "config": {"model": "hf", "model_args": "pretrained=m"}, "n-samples": {"longshort_ppl": {"effective": 1}},
        "configs": {"longshort_ppl": {"task": "longshort_ppl", "metadata": {}}}, "versions": {"longshort_ppl": 1}}))


@pytest.mark.parametrize("out, where", [("res_a", "is"), ("res_a/report", "lies inside")])
def test_the_report_refuses_an_out_in_a_results_folder_it_reads(tmp_path, monkeypatch, capsys, out, where):
    from torchtune_longshort.eval.report.build import main

    monkeypatch.chdir(tmp_path)
    _results(tmp_path / "res_a")
    _results(tmp_path / "res_b")
    before = _listing(tmp_path)
    with pytest.raises(SystemExit) as e:
        main(["res_a", "res_b", "--out", out])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and len(err) == 1, err
    assert err[0].endswith(f"--out={out!r} {where} the results folder 'res_a', which this report reads: the report "
                           "would be written among its files; name a folder outside it")
    assert _listing(tmp_path) == before
