"""One default sample count for the misalignment metric: the CLI without --num-samples and the lm-eval task without
mis_num_samples (loaded through lm-eval from its YAML) both measure DEFAULT_NUM_SAMPLES texts, as does a study
config that does not set eval.mis_num_samples."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.metrics.misalignment import DEFAULT_NUM_SAMPLES

from torchtune_longshort.eval.tasks import tasks_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]


def test_cli_default(tiny_llama2_dir, sp_tokenizer_dir, tmp_path, capsys):
    from torchtune_longshort.metrics.cli import main

    out = tmp_path / "m.json"
    assert main(["--checkpoint-dir", str(tiny_llama2_dir), "--tokenizer", str(sp_tokenizer_dir / "tokenizer.model"),
                 "--data", "stdlib", "--length", "32", "--output", str(out)]) == 0
    res = json.loads(out.read_text())
    assert res["num_samples"] == DEFAULT_NUM_SAMPLES == len(res["values"]["sce"])
    # the progress bar knew its total (tqdm prints "n/total")
    assert f"{DEFAULT_NUM_SAMPLES}/{DEFAULT_NUM_SAMPLES}" in capsys.readouterr().err


def test_an_output_that_cannot_be_written_is_refused_before_the_model_loads(tiny_llama2_dir, tmp_path, capsys,
                                                                             monkeypatch):
    # `--output <folder that takes no files>/x.json`: the model loaded and every sample was measured, then
    # "error: [Errno 1] Operation not permitted", naming neither the option nor the fix, and the result was lost
    import torchtune_longshort.metrics.cli as cli

    monkeypatch.setattr(cli, "load_hf_checkpoint", lambda *a, **k: pytest.fail("the model was loaded"))
    (tmp_path / "notes.json").write_text("mine")
    for output, needle in [("/proc/longshort_x/m.json", "--output's folder='/proc/longshort_x' cannot be created"),
                           (str(tmp_path / "notes.json" / "m.json"), "notes.json' is a file, not a folder")]:
        with pytest.raises(SystemExit) as exit_info:
            cli.main(["--checkpoint-dir", str(tiny_llama2_dir), "--data", "stdlib", "--length", "32", "--output", output])
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    with pytest.raises(SystemExit):  # the folder argument by its own name (it said checkpoint_dir=)
        cli.main(["--checkpoint-dir", str(tmp_path / "notes.json"), "--data", "stdlib", "--length", "32"])
    assert f"--checkpoint-dir='{tmp_path / 'notes.json'}' is a file" in capsys.readouterr().err
    assert (tmp_path / "notes.json").read_text() == "mine"


def test_task_default_through_lm_eval(sp_tokenizer_dir):
    from lm_eval.tasks import TaskManager

    from torchtune_longshort.eval.tasks.common.unavailable import LONGSHORT_MODEL, MODEL_KEY

    # the model the run uses, as longshort-eval tells the pack (else the task reads this process's command line)
    tm = TaskManager(include_path=str(tasks_path()), include_defaults=False,
                     metadata={"tokenizer": str(sp_tokenizer_dir), "max_seq_lengths": [128],
                               MODEL_KEY: LONGSHORT_MODEL})
    task = tm.load(["longshort_misalignment"])["tasks"]["longshort_misalignment"]
    assert "mis_num_samples" not in (task.config.metadata or {})  # the YAML does not restate the default
    assert len(list(task.test_docs())) == DEFAULT_NUM_SAMPLES


def test_study_default(tmp_path):
    from torchtune_longshort.study import load_study_config

    raw = yaml.safe_load((REPO / "configs/study/cpu_small.yaml").read_text())
    raw["eval"].pop("mis_num_samples")
    p = tmp_path / "s.yaml"
    p.write_text(yaml.safe_dump(raw))
    assert load_study_config(p, repo_root=REPO).eval.mis_num_samples == DEFAULT_NUM_SAMPLES
