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


@pytest.mark.parametrize("use_cache", [False, True])
def test_an_over_long_passkey_prompt_is_not_cut_by_hf_from_simple_evaluate(hf_folder, tmp_path, use_cache):
    """A 512-token passkey prompt on a 256-position model: ``simple_evaluate(model="hf")`` sent it and hf cut it
    from the left (the needle at depth 0 gone), scored as a number; ``longshort-eval --model hf`` and the
    ``longshort`` model refuse it. Now it is not sent from Python either: NaN, with hf's length named; also with
    ``use_cache`` (lm-eval wraps hf in its ``CachingLM``, which the tasks look through)."""
    from lm_eval import simple_evaluate

    meta = {"pretrained": str(hf_folder), "max_seq_lengths": "512", "passkey_num_samples": 1, "passkey_depths": [0]}
    out = simple_evaluate(model="hf", model_args=f"pretrained={hf_folder},dtype=float32", device="cpu",
                          tasks=["longshort_passkey"], task_manager=_task_manager(meta), bootstrap_iters=0,
                          use_cache=str(tmp_path / "cache") if use_cache else None)
    assert math.isnan(out["results"]["longshort_passkey"]["acc_512,none"])
    (reason,) = out["configs"]["longshort_passkey"]["not_scored"]
    assert "--model hf runs at most 256" in reason and "would cut them from the left: refused" in reason, reason


def test_an_instance_of_a_subclass_of_hfs_model_is_told_as_hf(hf_folder):
    """``simple_evaluate(model=<instance>)`` of a subclass of lm-eval's ``HFLM`` (a user's own; lm-eval's
    ``hf-multimodal`` is one): it cuts an over-long prompt from the left as ``HFLM`` does, so the 512-token passkey
    prompt is not sent to its 256 positions. Reference: ``HFLM`` itself (the test above)."""
    from lm_eval import simple_evaluate
    from lm_eval.models.huggingface import HFLM

    class OwnHF(HFLM):
        pass

    meta = {"pretrained": str(hf_folder), "max_seq_lengths": "512", "passkey_num_samples": 1, "passkey_depths": [0]}
    out = simple_evaluate(model=OwnHF(pretrained=str(hf_folder), dtype="float32", device="cpu"),
                          tasks=["longshort_passkey"], task_manager=_task_manager(meta), bootstrap_iters=0)
    assert math.isnan(out["results"]["longshort_passkey"]["acc_512,none"])
    (reason,) = out["configs"]["longshort_passkey"]["not_scored"]
    assert "--model hf runs at most 256" in reason, reason

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


def test_a_task_manager_of_ones_own_takes_the_tokenizer_of_the_model_evaluated(hf_folder):
    """lm-eval's way: ``simple_evaluate(model=..., model_args="pretrained=...", task_manager=TaskManager(
    include_path=...))``. simple_evaluate puts model_args into the tasks' metadata only in a TaskManager it builds,
    so every length was NaN with 'needs the model's tokenizer: pass it in --model_args', which the user had done.
    Now the task reads the tokenizer of the model lm-eval runs, and both models score the same perplexity."""
    from lm_eval import simple_evaluate

    meta = {"max_seq_lengths": "64", "ppl_source": "stdlib", "ppl_num_samples": 1}
    ppl = {}
    for model, args in (("longshort", f"pretrained={hf_folder}"), ("hf", f"pretrained={hf_folder},dtype=float32")):
        out = simple_evaluate(model=model, model_args=args, device="cpu", tasks=["longshort_ppl"],
                              task_manager=_task_manager(meta), bootstrap_iters=0)
        assert "not_scored" not in out["configs"]["longshort_ppl"], out["configs"]["longshort_ppl"]["not_scored"]
        ppl[model] = out["results"]["longshort_ppl"]["ppl_64,none"]
    assert math.isfinite(ppl["hf"]) and ppl["longshort"] == pytest.approx(ppl["hf"], rel=1e-5)


def test_a_task_loaded_without_a_model_or_tokenizer_says_where_python_gives_it():
    """Tasks loaded before any model (``get_task_dict``, then ``evaluate``) with no tokenizer: the reason names the
    TaskManager's metadata, where a Python caller gives it (it named --model_args alone)."""
    task = _task_manager({"max_seq_lengths": "64", "ppl_source": "stdlib"}).load(["longshort_ppl"])["tasks"][
        "longshort_ppl"]
    reason = task.dataset["test"][0]["error"]
    assert "needs the model's tokenizer" in reason and 'TaskManager(metadata={"tokenizer": "<path>"})' in reason


def _passkey_512_tasks(hf_folder):
    """A 512-token passkey task loaded once, before any model (``get_task_dict``), for two ``evaluate`` calls."""
    from lm_eval.tasks import get_task_dict

    meta = {"tokenizer": str(hf_folder), "max_seq_lengths": "512", "passkey_num_samples": 1, "passkey_depths": [0]}
    return get_task_dict(["longshort_passkey"], _task_manager(meta))


def _evaluate_passkey(tasks, model, folder):
    """``evaluate`` of the passkey task under ``hf`` (256 positions) or ``longshort`` (YaRN x2: 512 covered):
    its ``acc_512`` and its ``not_scored`` reasons."""
    from lm_eval.api.registry import get_model
    from lm_eval.evaluator import evaluate
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(folder), dtype="float32", device="cpu") if model == "hf" else \
        get_model("longshort").create_from_arg_string(f"pretrained={folder},rope=yarn,rope_factor=2", {"device": "cpu"})
    out = evaluate(lm=lm, task_dict=tasks, bootstrap_iters=0)
    return out["results"]["longshort_passkey"]["acc_512,none"], out["configs"]["longshort_passkey"].get("not_scored")


def test_a_task_dict_evaluated_by_longshort_then_hf_is_refused_under_hf(hf_folder):
    """One task dict, ``evaluate`` under longshort, then under hf (a user comparing the two): the task kept the
    first model's limits (none: longshort refuses for itself), so hf got the 512-token prompt, cut it from the left
    and scored it (acc 0.0, no reason). Now the limits are those of the model each ``evaluate`` runs."""
    tasks = _passkey_512_tasks(hf_folder)
    acc, reasons = _evaluate_passkey(tasks, "longshort", hf_folder)
    assert math.isfinite(acc) and reasons is None, reasons
    acc, reasons = _evaluate_passkey(tasks, "hf", hf_folder)
    assert math.isnan(acc), acc
    assert reasons and all("--model hf can take (max_length=256" in r for r in reasons), reasons


def test_a_task_dict_evaluated_again_gives_the_reasons_of_that_run_alone(hf_folder):
    """The same task dict under hf (refused: NaN with hf's reason), then under longshort (scored): the longshort
    results file listed hf's reason under not_scored beside its score, as the task summed reasons over runs."""
    tasks = _passkey_512_tasks(hf_folder)
    acc, reasons = _evaluate_passkey(tasks, "hf", hf_folder)
    assert math.isnan(acc) and reasons, reasons
    acc, reasons = _evaluate_passkey(tasks, "longshort", hf_folder)
    assert math.isfinite(acc) and reasons is None, reasons
