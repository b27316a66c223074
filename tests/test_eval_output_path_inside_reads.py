"""``longshort-eval run --output_path`` inside what the evaluation reads besides its model: a user's own
``--include_path`` of task YAMLs, a local data folder of ``--metadata`` (``ppl_data_files``, ``babilong_data_dir``),
the folder of a ``--metadata tokenizer`` file; lm-eval wrote its results there after the whole evaluation, exit 0,
and ``ppl_data_files`` read a folder's ``.json`` files as text the next run. Refused before lm-eval starts, naming
the key as typed. The references: lm-eval's own ``EvaluationTracker`` writing a results file for the same
``--output_path`` (in a copy), which lands in the folder, and the data folder's reader then reading that file."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest


def _lm_eval_writes(tmp_path: Path, output_path: str, data: str = "data") -> list:
    """The files lm-eval's own tracker writes for ``output_path`` and ``pretrained=model`` (in a copy of
    ``tmp_path``), and what ``ppl_data_files=data`` (a folder or a glob) then reads there."""
    from lm_eval.loggers.evaluation_tracker import EvaluationTracker

    from torchtune_longshort.data.file_paths import resolve_files
    from torchtune_longshort.eval.tasks.common.local_files import local_suffixes

    copy = tmp_path.parent / f"{tmp_path.name}_copy"
    shutil.copytree(tmp_path, copy)
    cwd = os.getcwd()
    os.chdir(copy)
    try:
        tracker = EvaluationTracker(output_path=output_path)
        tracker.general_config_tracker.log_experiment_args(model_source="hf", model_args={"pretrained": "model"},
                                                           system_instruction=None, chat_template=None,
                                                           fewshot_as_multiturn=False)
        tracker.save_results_aggregated(results={"results": {}, "configs": {}}, samples=None)
        return [str(p) for p in resolve_files(data, local_suffixes(), "ppl_data_files")]
    finally:
        os.chdir(cwd)
        shutil.rmtree(copy)


def _argv(*more: str) -> list:
    from torchtune_longshort.eval.cli_run import check_arguments, lm_eval_argv

    check_arguments(lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "hf", "--device", "cpu",
                                  "--model_args", "pretrained=model", *more]))


@pytest.fixture
def folders(tmp_path, monkeypatch):
    pytest.importorskip("lm_eval")
    monkeypatch.chdir(tmp_path)
    for name in ("model", "data", "mytasks", "tok"):
        (tmp_path / name).mkdir()
    (tmp_path / "model" / "config.json").write_text("{}")
    (tmp_path / "data" / "a.txt").write_text("some text " * 50)
    (tmp_path / "mytasks" / "my_ppl.yaml").write_text("task: my_ppl\n")
    (tmp_path / "tok" / "tokenizer.json").write_text("{}")
    (tmp_path / "tok" / "tokenizer_config.json").write_text("{}")
    return tmp_path


@pytest.mark.parametrize("more, said", [
    (["--include_path", "mytasks", "--output_path", "mytasks"], "--output_path='mytasks' is --include_path='mytasks'"),
    (["--metadata", json.dumps({"ppl_data_files": "data"}), "--output_path", "data/ev"],
     "--output_path='data/ev' lies inside --metadata ppl_data_files='data'"),
    (["--metadata", "babilong_data_dir=data", "--output_path", "data"], "--output_path='data' is --metadata "
                                                                        "babilong_data_dir='data'"),
    (["--metadata", "ppl_data_files=data/*.txt", "--output_path", "data/r.json"],
     "--output_path='data/r.json' lies inside the folder 'data' of --metadata ppl_data_files='data/*.txt'"),
    (["--metadata", "tokenizer=tok/tokenizer.json", "--output_path", "tok/ev"],
     "--output_path='tok/ev' lies inside the folder 'tok' of --metadata tokenizer='tok/tokenizer.json'"),
])
def test_an_output_path_among_what_the_run_reads_is_refused_before_lm_eval(folders, more, said):
    written = _lm_eval_writes(folders, more[-1])
    if more[-1].startswith("data"):  # the reference: the results land among the data, and are read as data
        assert any(f.endswith(".json") for f in written), written
    before = sorted(str(p) for p in folders.rglob("*"))
    with pytest.raises(ValueError) as e:
        _argv(*more)
    assert str(e.value).startswith(said) and "\n" not in str(e.value), str(e.value)
    assert str(e.value).endswith("which this evaluation reads: lm-eval's results would be written among its files; "
                                 "name a folder outside it"), str(e.value)
    assert sorted(str(p) for p in folders.rglob("*")) == before


@pytest.mark.parametrize("more, data", [
    (["--include_path", "mytasks", "--output_path", "ev"], "data"),
    (["--metadata", json.dumps({"ppl_data_files": "data"}), "--output_path", "ev"], "data"),
    # lm-eval writes in data/ev/model, below the folder of the glob's matches, which reads nothing there
    (["--metadata", "ppl_data_files=data/*.txt", "--output_path", "data/ev"], "data/*.txt"),
    (["--metadata", "tokenizer=tok/tokenizer.json", "--output_path", "ev.json"], "data"),
])
def test_an_output_path_beside_what_the_run_reads_passes(folders, more, data):
    assert _lm_eval_writes(folders, more[-1], data) == ["data/a.txt"]  # the reference: nothing read is lm-eval's
    _argv(*more)
