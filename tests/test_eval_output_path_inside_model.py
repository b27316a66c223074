"""``longshort-eval --output_path <model folder>`` (a folder inside it, ``<model>/r.json``, or ``.`` beside
``pretrained=model`` or ``peft=model``) had lm-eval write its results among the model's files, after the whole
evaluation; refused before lm-eval starts, naming both. The reference: lm-eval's own ``EvaluationTracker`` writing
a results file for the same ``--output_path`` and model arguments (in a copy), which lands in the model's folder."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest


def _listing(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def _lm_eval_writes(tmp_path: Path, output_path: str, model_args: dict) -> set:
    """Where lm-eval's own tracker writes a results file for these arguments (in a copy of ``tmp_path``)."""
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    copy = tmp_path.parent / f"{tmp_path.name}_copy"
    shutil.copytree(tmp_path, copy)
    cwd = os.getcwd()
    os.chdir(copy)
    try:
        before = set(_listing(copy))
        tracker = EvaluationTracker(output_path=output_path)
        tracker.general_config_tracker.log_experiment_args(model_source="hf", model_args=model_args, system_instruction=None,
                                                           chat_template=None, fewshot_as_multiturn=False)
        tracker.save_results_aggregated(results={"results": {}, "configs": {}}, samples=None)
        return {Path(p).parts[0] for p in set(_listing(copy)) - before}
    finally:
        os.chdir(cwd)
        shutil.rmtree(copy)


@pytest.mark.parametrize("output_path, model_args, said", [
    ("model", "pretrained=model", "--output_path='model' is --model_args pretrained='model'"),
    ("model/ev.json", "pretrained=model", "--output_path='model/ev.json' lies inside --model_args pretrained='model'"),
    (".", "pretrained=model", "--output_path='.' writes lm-eval's results in 'model'; that folder is --model_args "
                              "pretrained='model'"),
    (".", "pretrained=base,peft=model", "--output_path='.' writes lm-eval's results in 'model'; that folder is "
                                        "--model_args peft='model'"),
])
def test_an_output_path_among_the_models_files_is_refused_before_lm_eval(tmp_path, monkeypatch, output_path,
                                                                          model_args, said):
    pytest.importorskip("lm_eval")
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    monkeypatch.chdir(tmp_path)
    for name in ("model", "base"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text("{}")
    args = dict(item.split("=") for item in model_args.split(","))
    assert _lm_eval_writes(tmp_path, output_path, args) == {"model"}  # the reference: lm-eval writes into the model
    with pytest.raises(ValueError) as e:
        check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "hf", "--device", "cpu",
                                      "--model_args", model_args, "--output_path", output_path]))
    assert str(e.value).startswith(said) and "\n" not in str(e.value), str(e.value)
    assert str(e.value).endswith("which this evaluation reads: lm-eval's results would be written among its files; "
                                 "name a folder outside it") or str(e.value).endswith("name another --output_path")


@pytest.mark.parametrize("output_path, said", [
    ("model/ev", "--output_path='model/ev' lies inside --model_args checkpoint_dir='model'"),
    (".", "--output_path='.' writes lm-eval's results in 'model'; that folder is --model_args checkpoint_dir='model'"),
])
def test_the_refusal_names_checkpoint_dir_as_the_user_typed_it(tmp_path, monkeypatch, output_path, said):
    """``--model longshort --model_args checkpoint_dir=model``: the wrapper passes it on as ``pretrained=`` (so that
    lm-eval names its folder after it), and the refusal named ``--model_args pretrained='model'``, a key the user
    never typed. The reference: lm-eval's tracker given the arguments as passed on writes into the model."""
    pytest.importorskip("lm_eval")
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    monkeypatch.chdir(tmp_path)
    (tmp_path / "model").mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    assert _lm_eval_writes(tmp_path, output_path, {"pretrained": "model"}) == {"model"}
    with pytest.raises(ValueError) as e:
        check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "longshort", "--device", "cpu",
                                      "--model_args", "checkpoint_dir=model", "--output_path", output_path]))
    assert str(e.value).startswith(said) and "pretrained" not in str(e.value), str(e.value)
