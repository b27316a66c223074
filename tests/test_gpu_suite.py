"""benchmarks/gpu_suite.py --smoke: every part of the GPU suite runs end to end at tiny shapes on the CPU."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gpu_suite_smoke_runs_every_part(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1",
               HF_HOME=str(tmp_path / "hf_home"))
    p = subprocess.run(
        [sys.executable, "benchmarks/gpu_suite.py", "--smoke", "--out", str(tmp_path / "out"),
         "--work", str(tmp_path / "work")],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=300,
    )
    assert p.returncode == 0, p.stderr[-4000:]
    report = json.loads((tmp_path / "out" / "gpu_suite.json").read_text())
    assert report["smoke"] and set(report["parts"]) == {"loss", "recipe", "eval"}
    variants = {r["variant"] for r in report["parts"]["loss"]["rows"]}
    assert {"fused a=0.0", "fused a=0.1", "ckpt a=0.0", "naive a=0.0"} <= variants
    recipe = report["parts"]["recipe"]["results"]
    assert set(recipe) == {"torchtune full_finetune_single_device", "longshort alpha=0.0", "longshort alpha=0.1"}
    assert all(r["tokens_per_s"] > 0 and r["peak_mib"] > 0 for r in recipe.values())
    assert "Loss path: fused" in p.stdout + p.stderr
    for row in report["parts"]["eval"]["rows"]:
        assert row["result_diff"] < 1e-5  # the two lm-eval models agree on the log-likelihoods
    assert (tmp_path / "out" / "gpu_suite.md").read_text().startswith("# GPU suite")
