"""Lines of stock ``lm-eval --include_path <pack>`` a user cannot act on, caused by the pack, are not printed."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest

from torchtune_longshort.eval.tasks import tasks_path

REPO = Path(__file__).resolve().parents[1]
# lm-eval 0.4.13's api/task.py ConfigurableTask.download, for every task with a custom_dataset function
HINT = "Custom kwargs can be passed to `--metadata`"


def _stock_lm_eval(tmp_path, *args):
    lm_eval = str(Path(sys.executable).with_name("lm-eval"))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run([lm_eval, "run", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=600)


class _Lines(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines = []

    def emit(self, record):
        self.lines.append(record.getMessage())


def test_lm_evals_task_builder_gives_the_pack_its_metadata_without_the_custom_kwargs_hint(sp_tokenizer_dir):
    # lm-eval's own task loading (TaskManager + get_task_dict, as its CLI and simple_evaluate call them) builds each
    # task, which reads --metadata in its download; lm-eval's logger said the hint there for every pack task
    from lm_eval.tasks import TaskManager, get_task_dict

    meta = {"ppl_source": "stdlib", "max_seq_lengths": "64", "ppl_num_samples": 1, "tokenizer": str(sp_tokenizer_dir)}
    tm = TaskManager(include_path=str(tasks_path()), include_defaults=False, metadata=meta)
    lines = _Lines()
    logger = logging.getLogger("lm_eval.api.task")
    logger.addHandler(lines)
    try:
        tasks = get_task_dict(["longshort_ppl"], tm)
    finally:
        logger.removeHandler(lines)
    assert list(tasks) == ["longshort_ppl"]
    assert len(tasks["longshort_ppl"].dataset["test"]) == 1  # the metadata was read: one sample at 64 tokens
    assert [x for x in lines.lines if HINT in x] == [], lines.lines


@pytest.mark.slow
def test_stock_lm_eval_gives_the_pack_its_metadata_without_the_custom_kwargs_hint(tiny_llama2_dir,
                                                                                  sp_tokenizer_dir, tmp_path):
    # the user gave --metadata, which the task read (its length is the one scored); lm-eval still told every
    # custom_dataset task "longshort_ppl: Custom kwargs can be passed to `--metadata` in console ..."
    meta = {"ppl_source": "stdlib", "max_seq_lengths": "64", "ppl_num_samples": 1}
    p = _stock_lm_eval(tmp_path, "--model", "hf", "--model_args", f"pretrained={tiny_llama2_dir},"
                       f"tokenizer={sp_tokenizer_dir}", "--include_path", str(tasks_path()), "--tasks",
                       "longshort_ppl", "--metadata", json.dumps(meta), "--device", "cpu")
    assert p.returncode == 0, p.stderr[-3000:]
    assert "ppl_64" in p.stdout, p.stdout[-2000:]
    assert HINT not in p.stderr + p.stdout, p.stderr[-3000:]
