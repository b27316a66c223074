"""The real-model GPU study's quick variant on this CPU. (The CPU study's quick variant with a failing grid member runs
from the installed wheel: tests/test_wheel_install.py.) (Minutes on 2 shared CPU cores: slow.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
