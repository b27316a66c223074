"""The pack under lm-eval's own Python API (``simple_evaluate`` / ``evaluate``), with lm-eval's ``hf`` model in a
process that has imported the ``longshort`` model too (a user comparing the two). There is no ``--model`` on a
command line there, and no ``lm_eval_model`` in the metadata: the tasks learn the model from lm-eval's evaluator."""

from __future__ import annotations

import importlib
import math
import shutil
from pathlib import Path

import pytest

pytest.importorskip("lm_eval")


@pytest.fixture(scope="module")
def hf_folder(tiny_llama2_dir, sp_tokenizer_dir, tmp_path_factory):
    """The tiny 256-position checkpoint with its tokenizer in the folder, as lm-eval's ``hf`` model loads it."""
    d = tmp_path_factory.mktemp("hf_api") / "ck"
    shutil.copytree(tiny_llama2_dir, d)
    for f in Path(sp_tokenizer_dir).iterdir():
        shutil.copy(f, d / f.name)
    return d


def _task_manager(meta):
    from lm_eval.tasks import TaskManager

    importlib.import_module("torchtune_longshort.eval.model.adapter")  # registers longshort, as a user's script does
    from torchtune_longshort.eval.tasks import tasks_path

    return TaskManager(include_path=str(tasks_path()), include_defaults=False, metadata=meta)


def test_an_over_long_passkey_prompt_is_not_cut_by_hf_from_simple_evaluate(hf_folder):
    """A 512-token passkey prompt on a 256-position model: ``simple_evaluate(model="hf")`` sent it and hf cut it
    from the left (the needle at depth 0 gone), scored as a number; ``longshort-eval --model hf`` and the
    ``longshort`` model refuse it. Now it is not sent from Python either: NaN, with hf's length named."""
    from lm_eval import simple_evaluate

    meta = {"pretrained": str(hf_folder), "max_seq_lengths": "512", "passkey_num_samples": 1, "passkey_depths": [0]}
    out = simple_evaluate(model="hf", model_args=f"pretrained={hf_folder},dtype=float32", device="cpu",
                          tasks=["longshort_passkey"], task_manager=_task_manager(meta), bootstrap_iters=0)
    assert math.isnan(out["results"]["longshort_passkey"]["acc_512,none"])
    (reason,) = out["configs"]["longshort_passkey"]["not_scored"]
    assert "--model hf runs at most 256" in reason and "would cut them from the left: refused" in reason, reason


def test_misalignment_under_an_hf_instance_is_nan_with_its_reason_not_an_attribute_error(hf_folder):
    """Tasks loaded first, then ``evaluate(lm=HFLM(...))``: the misalignment task built its data (the model was not
    known yet) and lm-eval asked hf for ``next_token_divergence``: ``AttributeError: 'HFLM' object has no attribute
    'next_token_divergence'`` after every other task had run, no results. Now its rows are not sent, NaN with the
    reason naming hf, and the run's other task is scored."""
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM
    from lm_eval.tasks import get_task_dict

    meta = {"pretrained": str(hf_folder), "max_seq_lengths": "64", "mis_num_samples": 1, "mis_source": "stdlib",
            "ppl_source": "stdlib", "ppl_num_samples": 1}
    tasks = get_task_dict(["longshort_misalignment", "longshort_ppl"], _task_manager(meta))
    out = evaluate(lm=HFLM(pretrained=str(hf_folder), dtype="float32", device="cpu"), task_dict=tasks,
                   bootstrap_iters=0)
    assert all(math.isnan(out["results"]["longshort_misalignment"][f"{d}_64,none"]) for d in ("sce", "js"))
    (reason,) = out["configs"]["longshort_misalignment"]["not_scored"]
    assert reason.startswith("longshort_misalignment at length 64: needs --model longshort") and \
        "this run uses --model hf" in reason, reason
    assert math.isfinite(out["results"]["longshort_ppl"]["ppl_64,none"])
