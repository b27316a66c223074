"""A fine-tune whose recipe failed named its stage twice: the study said '[study] clex_a0_s0: FAILED at train: train:
recipe exited with 1: ...' and report.md's error column 'train: train: recipe exited ...' (the record's error held
'train: ...' beside its stage). Both now name it once; a record written before (its error 'train: ...') reads once in
the report too. The reference: the exit status and the last line the stand-in recipe wrote to its log."""

from __future__ import annotations

import json

from study_helpers import CPU_SMALL, ROOT, FakeExecutor

from torchtune_longshort.study import Study, load_study_config
from torchtune_longshort.study.report import _runs_markdown

KEY = "clex_a0_s0"


def _row(cfg, rec) -> str:
    rows = [x for x in _runs_markdown(cfg, {KEY: rec}) if x.startswith(f"| {KEY} |")]
    assert len(rows) == 1, rows
    return rows[0]


def test_a_failed_fine_tune_names_its_stage_once(tmp_path):
    out, said = tmp_path / "out", []
    cfg = load_study_config(CPU_SMALL, quick=True, repo_root=ROOT)
    study = Study(cfg, output_dir=out, repo_root=ROOT, executor=FakeExecutor(fail=[KEY]), log=said.append)
    run = next(r for r in study.runs() if r.key == KEY)
    study.run_one(KEY, run, evaluate=False)
    log = (out / "runs" / KEY / "train.log").read_text().splitlines()
    want = f"recipe exited with 1: {log[-1]}"  # what the stand-in recipe exited with and said last
    assert f"[study] {KEY}: FAILED at train: {want}" in said, [x for x in said if "FAILED" in x]
    rec = json.loads((out / "runs" / KEY / "result.json").read_text())
    assert (rec["status"], rec["stage"], rec["error"]) == ("failed", "train", want)
    assert _row(cfg, rec).endswith(f"| train: {want} |")
    # a record the study wrote before: its error named the stage, read once in the report as well
    assert _row(cfg, {**rec, "error": f"train: {want}"}).endswith(f"| train: {want} |")
