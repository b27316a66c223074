"""Known upstream noise is filtered in the entry points, narrowly: each filter drops its own message and nothing
else from the same logger, and the same evaluation run without the filters does print the lines (so it is the
filter, not a changed upstream, that removed them)."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from torchtune_longshort._quiet import LOG_FILTERS, DropMessages, _git_describe, dropping, filter_warnings

from torchtune_longshort.eval.tasks import tasks_path  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
NOISE = ("Skipping import of cpp extensions", "Custom kwargs can be passed to `--metadata`",
         "Metrics were not scored on the same number of documents", "overrides existing task")


def _record(name, level, msg):
    return logging.LogRecord(name, level, __file__, 1, msg, None, None)


@pytest.mark.parametrize("name, level, dropped, kept", [
    ("torchao", logging.WARNING,
     "Skipping import of cpp extensions due to incompatible torch version 2.13.0+cpu for torchao version 0.14.1",
     "Some other torchao warning"),
    ("lm_eval.evaluator_utils", logging.WARNING,
     "[longshort_passkey] Metrics were not scored on the same number of documents (acc,none=5, ...)",
     "[hellaswag] Metrics were not scored on the same number of documents (acc,none=5, ...)"),
    ("lm_eval.api.group", logging.WARNING,
     "Group 'longshort_babilong': metric 'missing_data,none' is missing in 1/5 tasks. Missing in: longshort_babilong_qa1",
     "Group 'longshort_babilong': metric 'acc,none' is missing in 4/5 tasks. Missing in: longshort_babilong_qa2, longshort_babilong_qa3"),
    ("torchtune.utils._logging", logging.INFO, "Saving final epoch checkpoint.",
     "Model checkpoint of size 0.01 GiB saved to /x"),
])
def test_each_filter_drops_its_message_only(name, level, dropped, kept):
    f = DropMessages(LOG_FILTERS[name])
    assert not f.filter(_record(name, level, dropped))
    assert f.filter(_record(name, level, kept))
    assert f.filter(_record(name, logging.ERROR, dropped))  # same text at another level still shows


def test_fuzzywuzzy_warning_filtered_by_category_and_module():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        filter_warnings()
        warnings.warn_explicit("Using slow pure-python SequenceMatcher. Install python-Levenshtein to remove this "
                               "warning", UserWarning, "fuzz.py", 11, module="fuzzywuzzy.fuzz")
        warnings.warn_explicit("Using slow pure-python SequenceMatcher.", UserWarning, "x.py", 1, module="other")
    assert [str(w.message) for w in caught] == ["Using slow pure-python SequenceMatcher."]


def test_transformers_deprecated_property_peft_reads_warns_nothing():
    # `--model hf --model_args pretrained=...,peft=<adapter>`: peft's PeftModel reads transformers' deprecated
    # `is_gradient_checkpointing` of the model it wraps (peft_model.py), and transformers says so (FutureWarning) to a
    # user whose command has no such call; the reference: the same read without the filter warns
    from transformers import LlamaConfig, LlamaForCausalLM

    model = LlamaForCausalLM(LlamaConfig(vocab_size=32, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                                         num_attention_heads=2))

    def read(filtered):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            if filtered:
                filter_warnings()
            assert getattr(model, "is_gradient_checkpointing", True) is False  # as peft reads it
            warnings.warn("`is_gradient_checkpointing` is deprecated and will be removed", FutureWarning)  # not
        return [str(w.message) for w in caught if "is_gradient_checkpointing" in str(w.message)]  # transformers'

    unfiltered = read(False)
    assert len(unfiltered) == 2 and unfiltered[0].startswith("`is_gradient_checkpointing` is deprecated and will be")
    assert read(True) == ["`is_gradient_checkpointing` is deprecated and will be removed"]  # this module's stays


def test_dropping_drops_its_lines_only_while_its_block_runs(caplog):
    """:func:`dropping` (the pack task's "Custom kwargs" hint, around its own download): the same line logged after
    the block shows, as another task's hint must."""
    name = "longshort.test.dropping"
    with caplog.at_level(logging.WARNING, logger=name):
        with dropping(name, [(logging.WARNING, r"^noise")]):
            logging.getLogger(name).warning("noise 1")
            logging.getLogger(name).warning("signal")
        logging.getLogger(name).warning("noise 2")
    assert [r.getMessage() for r in caplog.records] == ["signal", "noise 2"]


@pytest.mark.parametrize("where", ["repo", "elsewhere"])
def test_the_git_hash_recorded_is_lm_evals_own(where, tmp_path, monkeypatch):
    """:func:`_git_describe` records what lm-eval's ``get_git_commit_hash`` does, in a repository and outside one
    (git's error: lm-eval's fallback), with git's stderr discarded."""
    from lm_eval.loggers.utils import get_git_commit_hash

    monkeypatch.chdir(REPO if where == "repo" else tmp_path)
    assert _git_describe() == get_git_commit_hash()


_EVAL = ["run", "--model", "longshort", "--device", "cpu", "--tasks", "longshort_ppl,longshort_passkey", "--metadata",
         '{"ppl_source": "stdlib", "ppl_num_samples": 1, "passkey_num_samples": 1, "ppl_max_seq_lengths": [128], '
         '"passkey_max_seq_lengths": [256]}']
# The same CLI call without quiet_upstream: register the model and hand over to lm-eval, with the task index the
# wrapper builds (the pack alone, as longshort-eval does for pack-only task lists: lm-eval's ~14,000 built-in YAMLs
# cost this test ~11 s and none of the lines it looks for comes from them).
_UNFILTERED = ("import sys, torchtune_longshort.eval.model.adapter; from lm_eval.__main__ import cli_evaluate; "
               "from torchtune_longshort.eval.task_index import pack_only_index; "
               "sys.argv = ['lm-eval'] + sys.argv[1:]; i = sys.argv.index('--include_path') + 1; "
               "ctx = pack_only_index(sys.argv[1:], sys.argv[i]); assert ctx.__enter__(); cli_evaluate()")


def _run(cmd, tmp, fresh: bool = False):
    """``fresh``: not forked from the tests' zygote, whose imports printed their noise where no test sees it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **({"LONGSHORT_TEST_FRESH": "1"} if fresh else {})}
    p = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-3000:]
    return p.stdout + p.stderr


@pytest.mark.slow
def test_eval_entry_point_prints_none_of_the_noise(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    margs = ["--model_args", f"pretrained={tiny_llama2_dir},tokenizer={sp_tokenizer_dir}"]
    pack = ["--include_path", str(tasks_path())]  # plain lm-eval: the pack's folder named
    before = _run([sys.executable, "-c", _UNFILTERED, *_EVAL, *margs, *pack, "--output_path", str(tmp_path / "a")],
                  tmp_path, fresh=True)
    after = _run([sys.executable, "-m", "torchtune_longshort.eval", *_EVAL, *margs,
                  "--output_path", str(tmp_path / "b")], tmp_path, fresh=True)
    # the unfiltered run shows them (not the pack's "Custom kwargs" hint: its task class drops that one under any
    # lm-eval entry, tests/test_stock_lm_eval_noise.py)
    present = [n for n in (NOISE[0], NOISE[2]) if n in before]
    assert len(present) == 2, before[-3000:]
    assert [n for n in NOISE if n in after] == [], after[-3000:]
    assert "longshort_passkey" in after and "ppl_128" in after  # the results table is still printed


@pytest.mark.slow
def test_recipe_does_not_claim_a_final_epoch_checkpoint_and_logs_above_the_bar(tiny_llama2_dir, sp_tokenizer_dir,
                                                                             tmp_path):
    tune = str(Path(sys.executable).with_name("tune"))
    out = _run([tune, "run", "recipes/longshort_finetune.py", "--config", "configs/tiny/longshort_from_checkpoint.yaml",
                f"checkpoint_dir={tiny_llama2_dir}", f"tokenizer.path={sp_tokenizer_dir / 'tokenizer.model'}",
                f"output_dir={tmp_path / 'out'}", "max_steps=2", "save_every_n_steps=1", "validation=null"], tmp_path)
    assert "Saving final epoch checkpoint" not in out
    # the recipe's own line says what was saved; step 1's, logged while the progress bar is open, on a line of its
    # own above the bar, once (before: "longshort:  50%|... Checkpoint for step 1 written to ...", on the bar's line)
    lines = out.replace("\r", "\n").splitlines()
    for step in (1, 2):
        assert sum(x.startswith(f"Checkpoint for step {step} written to") for x in lines) == 1, out[-3000:]
    # the sizes it gives: the step folder's own (it gave the folder and its resume state together, as the folder's),
    # then the resume state's, each as the files on disk add up
    from torchtune_longshort.disk_space import size_text

    step2 = tmp_path / "out" / "step_2"
    folder = sum(f.stat().st_size for f in step2.rglob("*") if f.is_file())
    state = (tmp_path / "out" / "recipe_state" / "step_2.pt").stat().st_size
    line = next(x for x in lines if x.startswith("Checkpoint for step 2 written to"))
    assert line.endswith(f"({size_text(folder)}; its resume state recipe_state/step_2.pt {size_text(state)})"), line


def test_the_synthetic_command_prints_no_torchao_line(tmp_path):
    # `--pe rope` imports torchtune's RoPE, and so torchao, whose "Skipping import of cpp extensions" line the other
    # entry points filter; the reference: the same import in a fresh interpreter without the filter prints it.
    before = _run([sys.executable, "-c", "import torchtune_longshort.synthetic.models as m; m.SyntheticTransformer("
                   "pe='rope', dim=32, num_layers=1, num_heads=4, max_len=10)"], tmp_path, fresh=True)
    after = _run([sys.executable, "-m", "torchtune_longshort.synthetic", "--pe", "rope", "--task", "length",
                  "--l-train", "4", "--l-test", "8", "--steps", "2", "--out", str(tmp_path / "syn")], tmp_path,
                 fresh=True)
    assert "Skipping import of cpp extensions" in before, before[-2000:]
    assert "Skipping import of cpp extensions" not in after and "test_mse@l_test" in after, after[-2000:]
