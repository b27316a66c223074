"""Evaluation never sinks under any model (issue 25, item 3): a task without data sends no request; a generation
request that does not fit the evaluated model is scored NaN with the reason, decided by the same rule for lm-eval's
``hf`` as for ``longshort`` (:meth:`RequestLimits.plan`); the run writes its results file and exits 0.

The end-to-end case is the issue's own command, offline: ``longshort-eval run --model hf --model_args
pretrained=<512-position checkpoint> --tasks longshort_longbench_e`` (it used to crash with "max tokens to generate
(512) must be less than model's maximum sequence length (512)")."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from warm_start import with_warm_start

pytest.importorskip("lm_eval")

from torchtune_longshort.eval.model.limits import RequestLimits  # noqa: E402
from torchtune_longshort.eval.report.results_io import not_scored_of  # noqa: E402
from torchtune_longshort.eval.tasks.longbench_e.official_config import LONGBENCH_E_DATASETS  # noqa: E402
from torchtune_longshort.eval.tasks.longbench_e.task import task_of  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def ckpt512(sp_tokenizer_dir, tmp_path_factory):
    """A random Llama-2-shaped checkpoint of 512 positions with its tokenizer in the folder (what hf loads)."""
    from torchtune_longshort.models.hf_llama import write_random_llama2_checkpoint

    d = write_random_llama2_checkpoint(tmp_path_factory.mktemp("ck512") / "ck", vocab_size=512, embed_dim=64,
                                       num_layers=2, num_heads=4, num_kv_heads=2, intermediate_dim=172,
                                       max_seq_len=512, seed=0)
    for f in Path(sp_tokenizer_dir).iterdir():
        shutil.copy(f, Path(d) / f.name)
    return Path(d)


def _longshort_eval(args, tmp_path):
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
               PYTHONPATH=with_warm_start(str(REPO)))
    out = subprocess.run([sys.executable, "-m", "torchtune_longshort.eval", *args], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=600)
    return out.returncode, out.stdout + out.stderr


# ------------------------------------------------------------------ the decision, on counts
def test_one_rule_for_every_model():
    ours = RequestLimits("longshort", max_length=512, usable_length=512)
    hf = RequestLimits.of_other_model("hf", 512)
    # no room for the generation budget: refused under both (hf would assert)
    for limits in (ours, hf):
        plan = limits.plan(10, 512, "generate_until", "middle")
        assert plan.reason.startswith("max_gen_toks=512 leaves no room") and f"--model {limits.model}" in plan.reason
    # a prompt the task says may be cut in the middle: longshort cuts it, hf (left cuts only) refuses
    assert ours.plan(1000, 64, "generate_until", "middle").cut == "middle"
    assert "which --model hf cannot do" in hf.plan(1000, 64, "generate_until", "middle").reason
    # a task that declares nothing: longshort refuses by default, hf cuts from the left as it always does
    assert "may not be cut (truncation=none" in ours.plan(1000, 64, "generate_until").reason
    assert hf.plan(1000, 64, "generate_until").cut == "left"
    assert "may not be cut" in hf.plan(1000, 64, "generate_until", "none").reason
    # a fitting request runs uncut; a log-likelihood counts one position less than its tokens
    assert ours.plan(448, 64, "generate_until") == hf.plan(448, 64, "generate_until")
    assert not ours.plan(400, 113, "loglikelihood", slack=1).reason
    assert "needs 513 tokens" in ours.plan(1, 513, "loglikelihood", slack=1).reason


# ------------------------------------------------------------------ no request for what cannot be scored
def test_placeholder_rows_are_built_unsent(sp_tokenizer_dir, tmp_path):
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.tasks import tasks_path

    meta = {"tokenizer": str(sp_tokenizer_dir), "passkey_data_files": str(tmp_path / "missing.jsonl"),
            "max_seq_lengths": [256, 512]}
    task = TaskManager(include_path=str(tasks_path()), include_defaults=False,
                       metadata=meta).load(["longshort_passkey"])["tasks"]["longshort_passkey"]
    task.build_all_requests(limit=None, rank=0, world_size=1)
    assert len(task.instances) == 2 and all(i.repeats == 0 for i in task.instances)  # lm-eval sends none
    assert all("missing.jsonl" in i.doc["error"] for i in task.instances)
    task.apply_filters()
    out = task.process_results(task.instances[0].doc, [task.instances[0].filtered_resps["none"]])
    length = task.instances[0].doc["length"]  # NaN at its length, no value for the pooled acc
    assert math.isnan(out[f"acc_{length}"]) and "acc" not in out and "error" not in out  # the reason is not a metric
    assert "missing.jsonl" in next(iter(task.dump_config()["not_scored"]))  # ... it is in the task's config


# ------------------------------------------------------------------ the command
@pytest.mark.slow
def test_longbench_e_under_hf_on_a_512_position_model_offline_exits_0(ckpt512, tmp_path):
    rc, log = _longshort_eval(["run", "--model", "hf", "--model_args", f"pretrained={ckpt512}",
                               "--tasks", "longshort_longbench_e", "--output_path", str(tmp_path / "out")], tmp_path)
    assert rc == 0, log[-4000:]
    assert "must be less than model's maximum sequence length" not in log
    assert "CUDA is not available" not in log and "Running generate_until requests: 0it" in log
    data = json.loads(next((tmp_path / "out").rglob("results_*.json")).read_text())
    reasons = not_scored_of(data)
    for ds in LONGBENCH_E_DATASETS:
        res = data["results"][task_of(ds)]
        assert res["missing_data,none"] == 1.0 and "score,none" not in res and "error,none" not in res
        assert "Xnhyacinth/LongBench" in reasons[task_of(ds)] and "offline" in reasons[task_of(ds)]


@pytest.mark.slow
def test_longbench_e_under_hf_with_data_is_nan_with_its_reason(ckpt512, tmp_path):
    """With LongBench's data at hand, every dataset is NaN with its reason: gov_report / multi_news ask for 512
    tokens of a 512-position model; the others' prompts would need the middle cut LongBench declares, which hf
    does not make (it cuts from the left), so they are not sent either."""
    import importlib.util

    from torchtune_longshort.eval.cli_run import run_cli

    spec = importlib.util.spec_from_file_location("lb_fixture", REPO / "tests/fixtures/longbench/build_longbench_e_fixture.py")
    fixture = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(fixture)
    data_dir = fixture.build(tmp_path / "data")
    data = run_cli(["run", "--model", "hf", "--model_args", f"pretrained={ckpt512}", "--tasks", "longshort_longbench_e",
                    "--metadata", json.dumps({"longbench_e_data_dir": str(data_dir)}),
                    "--output_path", str(tmp_path / "out")])
    reasons = not_scored_of(data)
    for ds in LONGBENCH_E_DATASETS:
        assert math.isnan(data["results"][task_of(ds)]["score,none"])
        want = "leaves no room" if ds in ("gov_report", "multi_news") else "which --model hf cannot do"
        assert want in reasons[task_of(ds)] and "(3 samples)" in reasons[task_of(ds)], reasons[task_of(ds)]
