"""A study folder holding runs of an earlier config (an alpha dropped from the grid since) is reported with one line
naming those runs, left out of the report and kept; before, they were left out without a word. The folder's own
listing (the run folders with a result.json) against the config's keys is the reference; the report itself is
stubbed (its tables and figures are tests/test_study_report.py's)."""

from __future__ import annotations

import json

import yaml

import torchtune_longshort.study.__main__ as study_main
from torchtune_longshort.study import Study, load_study_config
from study_helpers import CPU_SMALL, ROOT, FakeExecutor


def test_runs_of_an_earlier_grid_are_named_not_silently_left_out(tmp_path, monkeypatch, capsys):
    out = tmp_path / "out"
    Study(load_study_config(CPU_SMALL, quick=True, repo_root=ROOT), output_dir=out, repo_root=ROOT,
          executor=FakeExecutor(), log=lambda m: None).claim_output()
    for key in ("base", "runs/clex_a0_s0", "runs/clex_a0.3_s0", "runs/clex_a0_s1"):  # s1: no record, not a run
        (out / key).mkdir(parents=True)
        if not key.endswith("s1"):
            (out / key / "result.json").write_text(json.dumps({"key": key.split("/")[-1], "status": "ok"}))
    raw = yaml.safe_load(CPU_SMALL.read_text())
    raw["quick"]["alphas"] = [0]  # clex_a0.3_s0 leaves the grid
    changed = tmp_path / "changed.yaml"
    changed.write_text(yaml.safe_dump(raw))
    grid = {r.key for r in load_study_config(changed, quick=True, repo_root=ROOT).grid}
    left = sorted(p.parent.name for p in (out / "runs").glob("*/result.json") if p.parent.name not in grid)
    assert left == ["clex_a0.3_s0"]
    monkeypatch.setattr(study_main, "build_report", lambda *a, **k: {
        "runs": {"base": {"status": "ok"}, "clex_a0_s0": {"status": "ok"}}, "plots": []})
    assert study_main.main(["--config", str(changed), "--quick", "--out", str(out), "--repo-root", str(ROOT),
                            "--report-only"]) == 0
    lines = capsys.readouterr().out.splitlines()
    said = [x for x in lines if "not in this config's grid" in x]
    assert said == [f"[study] 1 run in {out / 'runs'} not in this config's grid, left out of the report and "
                    f"kept: {', '.join(left)}"], lines
    assert (out / "runs" / "clex_a0.3_s0" / "result.json").is_file()
