"""Data-parallel evaluation (``torchtune_longshort.eval.model.processes``): the ``longshort`` model under ``torchrun``
with 2 CPU processes (gloo) gives every metric of the one-process run on the same checkpoint, each process scoring
its share of the documents, and rank 0 alone writes the results."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
from warm_start import with_warm_start

REPO = Path(__file__).resolve().parents[1]
TASKS = "longshort_ppl,longshort_misalignment,longshort_passkey"
# perplexity at 2 lengths: its documents take them in turn, so every 2nd document (one process's share) is all of
# one length, and each process scores a metric the other does not (lm-eval 0.4.13 ended with KeyError: ('ppl_64',
# 'none') after every request had run, no results file)
META = json.dumps({"ppl_source": "stdlib", "ppl_num_samples": 4, "max_seq_lengths": [128], "ppl_max_seq_lengths":
                   [64, 128], "passkey_num_samples": 2, "passkey_max_seq_lengths": [32, 64, 256]})
# passkey at 32 and 64 cannot be scored (the prompt without haystack is longer): one such document in each process


def _args(ckpt: Path, tok: Path, out: Path) -> list:
    return ["run", "--model", "longshort", "--model_args", f"checkpoint_dir={ckpt},tokenizer={tok}", "--device", "cpu",
            "--batch_size", "2", "--tasks", TASKS, "--metadata", META, "--output_path", str(out), "--log_samples"]


def _doc_ids(out: Path) -> dict:
    from torchtune_longshort.eval.cli_run import samples_of

    return {t: sorted(r["doc_id"] for r in samples_of(out, t)) for t in TASKS.split(",")}


@pytest.mark.slow
def test_two_processes_give_the_one_process_metrics(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    from torchtune_longshort.eval.cli_run import run_cli

    one = run_cli(_args(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "one"))["results"]
    env = dict(os.environ, PYTHONPATH=with_warm_start(str(REPO)), OMP_NUM_THREADS="1", TMPDIR=str(tmp_path))
    p = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "-m",
                        "torchtune_longshort.eval", *_args(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "two")],
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert p.returncode == 0, p.stderr[-4000:]
    log = p.stdout + p.stderr
    for task in TASKS.split(","):  # each process built its share of every task's requests
        assert f"Building contexts for {task} on rank 1" in log and f"Building contexts for {task} on rank 0" in log
    files = list((tmp_path / "two").rglob("results_*.json"))
    assert len(files) == 1  # rank 0 alone wrote the results
    two_file = json.loads(files[0].read_text())
    two = two_file["results"]
    # the samples not scored, counted over both processes (the results file had rank 0's count alone)
    one_cfg = json.loads(next((tmp_path / "one").rglob("results_*.json")).read_text())["configs"]
    for task in TASKS.split(","):
        for key in ("not_scored", "not_scored_lengths"):
            assert one_cfg[task].get(key) == two_file["configs"][task].get(key), (task, key)
    assert one_cfg["longshort_passkey"]["not_scored_lengths"] == {"32": 5, "64": 5}  # a placeholder per depth
    assert one.keys() == two.keys()
    for task, metrics in one.items():
        numeric = {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        assert numeric, task
        for k, v in numeric.items():
            w = two[task][k]
            assert (math.isnan(v) and math.isnan(w)) or w == pytest.approx(v, rel=1e-6, abs=1e-9), (task, k, v, w)
    # the logged samples: every document once, gathered from both processes
    assert _doc_ids(tmp_path / "two") == _doc_ids(tmp_path / "one")
