"""Nothing lost, nothing silent (recipe side): bad config values fail before any side effect with the field named;
one writer per output folder (what ``overwrite_output_dir`` deletes: test_reliability_overwrite.py); a non-finite
gradient norm stops the run; a torn last metrics line does not block resume. In-process (the recipe class), so the set
stays fast.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from recipe_config import make_cfg

REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


BAD_VALUES = [
    ({"max_step": 2}, KeyError, r"'max_step' \(did you mean 'max_steps'\?\)"),
    ({"save_every_n_steps": 0}, ValueError, r"save_every_n_steps=0 .*integer >= 1"),
    ({"log_every_n_steps": 0}, ValueError, r"log_every_n_steps=0"),
    ({"clip_grad_norm": "abc"}, ValueError, r"clip_grad_norm='abc'"),
    ({"e_range": [1, "L/0"]}, ValueError, r"e_range="),
    ({"e_range": [0, "L/2"]}, ValueError, r"e_range="),
    ({"max_steps": -1}, ValueError, r"max_steps=-1"),
    ({"seq_len": 2}, ValueError, r"seq_len=2"),
    ({"dtype": "fp8"}, ValueError, r"dtype='fp8'"),
    ({"loss.alpha": -0.1}, ValueError, r"loss.alpha=-0.1"),
    ({"batch_size": 3, "gradient_accumulation_steps": 2}, ValueError, r"batch_size=3 is not divisible"),
    ({"window_bos": "yes"}, ValueError, r"window_bos='yes'"),
    ({"clip_rope_separately": "yes"}, ValueError, r"clip_rope_separately='yes'"),
    ({"window_bos": True, "loss.alpha": 0.1}, ValueError, r"window_bos=True with loss.alpha=0.1"),
]


@pytest.mark.parametrize("over,exc,match", BAD_VALUES, ids=[next(iter(o)) for o, _, _ in BAD_VALUES])
def test_bad_values_fail_before_any_side_effect(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, exc, match):
    out = tmp_path / "out"
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, **over)
    with pytest.raises(exc, match=match):
        recipe_cls(cfg)  # the constructor checks; setup() would make the folder
    assert not out.exists()


def test_cuda_device_without_cuda_is_refused(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    out = tmp_path / "out"
    with pytest.raises(ValueError, match="device='cuda': CUDA is not available on this machine; pass device=cpu"):
        recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, device="cuda"))
    assert not out.exists()


def test_torchtune_key_removal_still_works(tiny_llama2_dir, sp_tokenizer_dir, tmp_path):
    """``~validation`` on the command line removes the key; the schema does not ask for it back."""
    from torchtune_longshort.training.recipe_config import load_recipe_config

    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "o")
    del cfg["validation"]
    assert load_recipe_config(cfg).validation is None


def test_a_validation_override_after_its_removal_says_how_to_turn_validation_off(tiny_llama2_dir, sp_tokenizer_dir,
                                                                                 tmp_path):
    """``'~validation' validation.seq_len=128``: torchtune deletes the section, then its key=value puts it back
    without a dataset, and the refusal said only that validation.dataset is missing; it now says validation is
    optional and how to turn it off (no validation.* override beside '~validation': torchtune's parser is the
    reference for both command lines)."""
    from argparse import Namespace

    from omegaconf import OmegaConf
    from torchtune.config._utils import _merge_yaml_and_cli_args

    from torchtune_longshort.training.recipe_config import load_recipe_config

    base = OmegaConf.to_container(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "o"))
    cfg = _merge_yaml_and_cli_args(Namespace(**base), ["~validation", "validation.seq_len=128"])
    assert set(cfg.validation) == {"seq_len"}
    with pytest.raises(KeyError) as e:
        load_recipe_config(cfg)
    assert str(e.value).startswith("config is missing required key 'validation.dataset'"), str(e.value)
    assert "(validation is optional: to turn it off, give '~validation' (or validation=null) with no validation.* " \
        "override on the same command line" in str(e.value), str(e.value)
    for off in (["~validation"], ["validation=null"]):
        assert load_recipe_config(_merge_yaml_and_cli_args(Namespace(**base), off)).validation is None


def test_second_writer_is_refused_and_a_dead_holder_is_taken_over(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                   sp_tokenizer_dir):
    import shutil

    from torchtune_longshort.training.output_dir import MARKER, OutputDirLock

    out = tmp_path / "out"
    holder = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        out.mkdir()
        (out / ".lock").write_text(f"{holder.pid}\n")
        with pytest.raises(RuntimeError, match=f"in use by another run \\(PID {holder.pid}"):
            recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1)).setup()
        # the folder of a run still setting up (its marker, its step_0 staged): a second run was told that run had
        # stopped before its first save, to pass overwrite_output_dir=True; the folder's lock is asked first
        (out / MARKER).write_text("")
        (out / ".staging" / "step_0").mkdir(parents=True)
        for over in ({}, {"resume": True}):
            with pytest.raises(RuntimeError, match=f"^output_dir='{out}' is in use by another run \\(PID "
                                                   f"{holder.pid}, .*\\); wait for it, or choose another output_dir$"):
                recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1, **over)).setup()
        shutil.rmtree(out / ".staging")
        (out / MARKER).unlink()
    finally:
        holder.kill()
        holder.wait()
    # The holder is dead now: its lock is stale and the next run takes it.
    lock = OutputDirLock(out).acquire()
    assert (out / ".lock").read_text().split()[0] == str(os.getpid())
    lock.release()
    assert not (out / ".lock").exists()


@pytest.mark.parametrize("clip", [1.0, None])
def test_infinite_gradient_norm_stops_the_run(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir, clip):
    out = tmp_path / "out"
    r = recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=3, save_every_n_steps=1,
                            clip_grad_norm=clip))
    r.setup()
    before = r._model.output.weight.detach().clone()
    # A finite loss whose gradient overflows: clipping would scale every update to zero and the run would go on.
    r._model.output.weight.register_hook(lambda g: g * float("inf"))
    with pytest.raises(FloatingPointError, match=r"non-finite gradient norm inf at step 1 \(rank 0\), e=\d+") as err:
        r.train()
    r.release_output_dir()
    # one line, as a refusal (it was a traceback), saying how to go on: no checkpoint to resume from at step 1 (the
    # rerun's "exists" refusal advised resume=True, and resume=True then advised an overwrite)
    from torchtune_longshort.refusals import fault_line

    assert fault_line(err.value) == str(err.value) and str(err.value).endswith(
        "No checkpoint of this run to resume from: at the first steps a non-finite value comes from the start weights "
        "(checkpointer.checkpoint_dir), the data or optimizer.lr; mend it, then start the run again with "
        "overwrite_output_dir=True")
    with pytest.raises(FileExistsError, match=r"It holds no checkpoint to resume from .*overwrite_output_dir=True"):
        recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=3)).setup()
    assert torch.equal(r._model.output.weight.detach(), before)  # no optimizer step was taken
    assert not list(out.glob("step_[1-9]*"))


def test_torn_last_metrics_line_is_dropped_on_resume(tmp_path):
    from torchtune_longshort.training.metrics import JsonlMetricLogger

    p = tmp_path / "metrics.jsonl"
    p.write_text('{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n{"step": 3, "lo')
    JsonlMetricLogger(p, resume_step=2)
    assert p.read_text() == '{"step": 1, "loss": 2.0}\n{"step": 2, "loss": 1.5}\n'
    p.write_text('{"step": 1}\nnot json\n{"step": 2}\n')
    with pytest.raises(ValueError, match=r"metrics.jsonl:2"):
        JsonlMetricLogger(p, resume_step=2)


def test_resume_from_step_0_only_says_what_to_do(recipe_cls, tmp_path, sp_tokenizer_dir):
    """A run from scratch killed before its first save leaves step_0 (no recipe state): not a resume point."""
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune_longshort.models.hf_model import decoder_config, hf_decoder

    out = tmp_path / "out"
    node = dict(family="llama", vocab_size=512, num_layers=1, num_heads=2, num_kv_heads=2, embed_dim=32,
                max_seq_len=128)
    write_hf_checkpoint(out / "step_0", hf_decoder(**node).state_dict(), decoder_config(node),
                        tokenizer=sp_tokenizer_dir)
    cfg = make_cfg(None, sp_tokenizer_dir, out, resume=True,
                   model={"_component_": "torchtune_longshort.models.hf_decoder", **node})
    # a folder the recipe did not make (no marker): overwrite would be refused too, so the hint is another folder
    with pytest.raises(FileNotFoundError, match="this recipe did not make that folder: choose another output_dir"):
        recipe_cls(cfg).setup()
    (out / ".longshort_output").write_text("")  # as the recipe leaves it
    with pytest.raises(FileNotFoundError, match=r"leaves only step_0: output_dir also holds 'step_0/ \(no "
                                                r"\.longshort_files\)', which this recipe did not write: move"):
        recipe_cls(cfg).setup()  # a hand-made step_0 (no list of its files): the overwrite would refuse it too
    step_0 = out / "step_0"
    (step_0 / ".longshort_files").write_text(json.dumps(sorted(p.name for p in step_0.iterdir())))  # as the recipe
    with pytest.raises(FileNotFoundError,
                       match="leaves only step_0: start the run again with overwrite_output_dir=True"):
        recipe_cls(cfg).setup()
    # a whole step_2 whose recipe state is gone, then one missing its weights: the same advice, which would delete
    # that step; now what is missing, and a new run from the step's weights
    import shutil

    shutil.copytree(out / "step_0", out / "step_2")
    with pytest.raises(FileNotFoundError, match=r"\(step_2 is whole, but not its optimizer and data state "
                                                r"recipe_state/step_2.pt: to train on from its weights, start a new "
                                                r"run with checkpoint_dir='.*step_2'\)$"):
        recipe_cls(cfg).setup()
    for f in (out / "step_2").glob("*.safetensors"):
        f.unlink()
    with pytest.raises(FileNotFoundError, match=r"\(step_2 is not whole: .*safetensors"):
        recipe_cls(cfg).setup()


# ------------------------------------------------------- data read before step 1 (records: test_data_records.py)
def test_corpus_shorter_than_one_sample_is_refused_before_step_1(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                 sp_tokenizer_dir):
    small = tmp_path / "small.txt"
    small.write_text("x = 1\n" * 5)
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out")
    cfg.dataset = OmegaConf.create({"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(small)})
    with pytest.raises(ValueError, match=r"fewer than one sample of seq_len \+ e_max \+ 1 = 97"):
        recipe_cls(cfg).setup()
    assert not list((tmp_path / "out").glob("step_*"))


# ---------------------------------------------------------------- resume with a changed config
def test_resume_refuses_changes_that_break_exactness_and_applies_the_others():
    from torchtune_longshort.training.resume import compare_resume_config

    saved = {"seq_len": 64, "max_steps": 8, "optimizer": {"lr": 3e-3}, "loss": {"alpha": 0.1}, "resume": False}
    applied = compare_resume_config(saved, {**saved, "max_steps": 12, "optimizer": {"lr": 1e-3}, "resume": True})
    assert applied == [("max_steps", 8, 12), ("optimizer.lr", 3e-3, 1e-3)]
    with pytest.raises(ValueError, match=r"loss.alpha: 0.1 -> 0.3; seq_len: 64 -> 128"):
        compare_resume_config(saved, {**saved, "seq_len": 128, "loss": {"alpha": 0.3}})


def test_a_checkpoint_missing_a_shard_is_not_a_resume_point(tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    """A step folder counts as complete only when every file its index names is there."""
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder, read_hf_config
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune.models.convert_weights import hf_to_tune
    from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path

    cfg = read_hf_config(tiny_llama2_dir)
    sd = hf_to_tune(CheckpointFolder.open(tiny_llama2_dir).hf_state_dict(), num_heads=cfg["num_attention_heads"],
                    num_kv_heads=cfg["num_key_value_heads"], dim=cfg["hidden_size"])
    for step in (2, 4):
        d = write_hf_checkpoint(tmp_path / f"step_{step}", sd, cfg, tokenizer=sp_tokenizer_dir, max_shard_bytes=100_000)
        recipe_state_path(d).parent.mkdir(exist_ok=True)
        recipe_state_path(d).write_bytes(b"")
    assert StepCheckpoints(tmp_path).latest(resumable=True).name == "step_4"
    next((tmp_path / "step_4").glob("model-00002-*.safetensors")).unlink()
    assert StepCheckpoints(tmp_path).latest(resumable=True).name == "step_2"


def test_a_plain_rope_run_at_fewer_positions_keeps_the_starts_in_config_json(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                               sp_tokenizer_dir):
    """``model.max_seq_len`` below the start's positions (to save memory) leaves the model's RoPE as it was, and
    wrote the shorter length into the saved config.json: every later evaluation of the step (``hf`` and
    ``longshort`` alike) was then held to it. The reference: the start folder's own positions. A run at more
    positions writes more (it trained there)."""
    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder

    start = CheckpointFolder.open(tiny_llama2_dir).usable_length
    for length, saved in ((start // 2, start), (start * 2, start * 2)):
        out = tmp_path / f"run_{length}"
        run = recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1, **{"model.max_seq_len": length}))
        run.setup()
        run.train()
        run.release_output_dir()
        config = json.loads((out / "step_1" / "config.json").read_text())
        assert config["max_position_embeddings"] == saved
        assert CheckpointFolder.open(out / "step_1").usable_length == saved


def test_the_closing_line_names_a_log_folder_only_where_the_logger_made_one(tmp_path):
    # metric_logger=torchtune.training.metric_logging.StdoutLogger (torchtune's shorthand for a component swap) keeps
    # the config's log_dir, which StdoutLogger takes and ignores: the run ended naming `(and <output_dir>/logs)`, a
    # folder that was never made
    from torchtune_longshort.training.metrics import where_logged

    logs = tmp_path / "logs"
    line = where_logged(tmp_path, str(logs))
    assert line == f"[longshort] metrics:    {tmp_path / 'metrics.jsonl'} (and the metric logger)"
    logs.mkdir()
    assert where_logged(tmp_path, str(logs)).endswith(f"(and {logs})")
    assert where_logged(tmp_path, None).endswith("(and the metric logger)")


def test_the_progress_bar_shows_the_steps_mean_e_as_metrics_jsonl_logs_it(tmp_path):
    """Under gradient accumulation a step's e is the mean of its micro-batches' e (metrics.jsonl: 37.5); the bar
    showed int(37.5) = 37, an e no micro-batch drew."""
    from torchtune_longshort.training.metrics import JsonlMetricLogger, RunLog

    class Logger:
        def log_dict(self, payload, step):
            pass

    run = RunLog(Logger(), JsonlMetricLogger(tmp_path / "metrics.jsonl"), enabled=True)
    run.start(total_steps=4, step=0)
    try:
        for e in (37.5, 16.0, 37.25, 100.0):  # 37.25: the mean of four micro-batches
            run.log_step(1, {"loss": 2.0, "ce": 2.0, "misalignment": 0.5, "e": e}, 1e-4, {}, torch.device("cpu"))
            assert run.pbar.postfix.split("e=")[1].split(",")[0] == f"{e:g}"
    finally:
        run.close()
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["e"] for r in rows if "e" in r] == [37.5, 16.0, 37.25, 100.0]
