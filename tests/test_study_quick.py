"""The study's quick variant end to end, for real: pre-training, fine-tunes through ``tune run``, lm-eval through
the task pack, the report; plus a grid member whose recipe fails (its checkpointer.model_type does not convert the
base's family: the study's own checks cannot see that, the recipe refuses it at start) and must be recorded with its
error while the rest of the grid runs, and the study must exit 1, its last line naming the failures' logs. A second
invocation must skip everything that was ok. (Several minutes on 2 shared CPU cores: slow.)"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_quick_study_end_to_end_with_a_failing_run(tmp_path):
    raw = yaml.safe_load((ROOT / "configs/study/cpu_small.yaml").read_text())
    raw["quick"]["methods"] = {"pi": {"method": "linear"},
                               "bad": {"method": "linear", "overrides": {"checkpointer": {"model_type": "MISTRAL"}}}}
    raw["quick"]["alphas"] = [0, 0.3]
    cfg = tmp_path / "study.yaml"
    cfg.write_text(yaml.safe_dump(raw))
    out, rep = tmp_path / "out", tmp_path / "report"
    cmd = [sys.executable, "-m", "torchtune_longshort.study", "--config", str(cfg), "--quick", "--out", str(out),
           "--report-dir", str(rep), "--repo-root", str(ROOT)]
    p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 1, p.stdout[-3000:] + p.stderr[-3000:]
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("[study] 2 of 5 runs failed (bad_a0_s0, bad_a0.3_s0); logs: ") and "train.log" in last
    summary = json.loads((rep / "summary.json").read_text())
    runs = summary["runs"]
    assert {k: r["status"] for k, r in runs.items()} == {
        "base": "ok", "pi_a0_s0": "ok", "pi_a0.3_s0": "ok", "bad_a0_s0": "failed", "bad_a0.3_s0": "failed"}
    assert "MISTRAL" in runs["bad_a0_s0"]["error"]
    md = (rep / "report.md").read_text()
    assert "| bad_a0_s0 | failed |" in md and "MISTRAL" in md
    # lm-eval numbers reached the tables: the pi rows have values at every ppl length
    ppl = summary["tables"]["ppl"]["methods"]["pi"]
    assert all(c["mean"] is not None and c["mean"] > 1 for row in ppl for c in row["cells"].values())
    rec = json.loads((rep / "runs/pi_a0.3_s0/result.json").read_text())
    assert rec["spec"]["recipe_config"]["loss"]["alpha"] == 0.3
    assert rec["results"]["longshort_ppl"]["ppl_512"] == ppl[1]["cells"]["512"]["mean"]
    assert rec["curves"]  # per-position curves came back from lm-eval's samples
    # What the study prints: its own lines and its progress bar, no upstream warning lines.
    printed = (p.stdout + p.stderr).replace("\r", "\n")
    assert not [x for x in printed.splitlines() if "warn" in x.lower()], printed[-3000:]
    assert "study runs: 100%" in printed and "5/5" in printed
    assert rec["provenance"]["stdlib_corpus"] == summary["provenance"]["stdlib_corpus"]
    # The evaluation logs (lm-eval's output) carry none of the filtered noise either.
    eval_log = (out / "runs/pi_a0_s0/eval.log").read_text()
    for noise in ("Custom kwargs can be passed", "not scored on the same number", "overrides existing task",
                  "Skipping import of cpp extensions", "metric 'missing_data,none' is missing"):
        assert noise not in eval_log, noise
    assert "Saving final epoch checkpoint" not in (out / "runs/pi_a0_s0/train.log").read_text()

    # Rerun: every ok run is skipped; only the two failing ones are tried again.
    t0 = time.time()
    p2 = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=900)
    assert p2.returncode == 1
    assert p2.stdout.count("result.json present (ok), skipped") == 3
    assert p2.stdout.count("FAILED at train") == 2


@pytest.mark.slow
def test_gpu_smollm2_quick_runs_on_the_cpu(tmp_path):
    """The real-model GPU study's ``--quick`` as shipped, on this CPU: the base from the package registry (the
    ``pypi:`` base, converted once and cached), one YaRN fine-tune (alpha 0: the quick grid is its CE baseline) through ``tune run``, every task of
    the config evaluated, the report written; so the GPU config cannot rot while no GPU runs it."""
    out, rep = tmp_path / "out", tmp_path / "report"
    cmd = [sys.executable, "-m", "torchtune_longshort.study", "--config", str(ROOT / "configs/study/gpu_smollm2.yaml"),
           "--quick", "--out", str(out), "--report-dir", str(rep), "--repo-root", str(ROOT)]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads((rep / "summary.json").read_text())
    assert {k: r["status"] for k, r in summary["runs"].items()} == {"base": "ok", "yarn_a0_s0": "ok"}
    md = (rep / "report.md").read_text()
    # every cell measured: the BABILong 1k rows are generated to fit the eval model's max_length (1024, the label)
    assert "quick variant" in md and "n/a (note 1" not in md
    assert "pre-flight check passed" in p.stdout
