"""Nothing lost, nothing silent (recipe side): bad config values fail before any side effect with the field named;
``overwrite_output_dir`` deletes only what the recipe made; one writer per output folder; a non-finite gradient norm
stops the run; a torn last metrics line does not block resume. In-process (the recipe class), so the set stays fast.
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


@pytest.mark.parametrize("field", ["dataset.path", "dataset.data_files", "validation.dataset.path", "tokenizer.path"])
def test_overwrite_refuses_when_an_input_lies_inside_output_dir(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                sp_tokenizer_dir, field):
    """Every input the config names is protected, not only the start checkpoint: refused before anything, with the
    field and the path named, and nothing deleted."""
    out = tmp_path / "out"
    out.mkdir()
    (out / ".longshort_output").write_text("")  # a folder an earlier run made: overwrite may delete it...
    corpus = out / "corpus.jsonl"  # ...but it holds the user's data
    corpus.write_text("".join('{"text": "x = 1\\n"}\n' for _ in range(200)))
    tok = sp_tokenizer_dir
    over = {"overwrite_output_dir": True}
    if field == "dataset.path":
        over["dataset"] = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(corpus)}
    elif field == "dataset.data_files":
        over["dataset"] = {"_component_": "torchtune.datasets.text_completion_dataset", "source": "json",
                           "data_files": str(corpus), "split": "train"}
    elif field == "validation.dataset.path":
        over["validation"] = {"dataset": {"_component_": "torchtune_longshort.data.corpus.local_text",
                                          "path": str(corpus)}, "seq_len": 64, "num_sequences": 1}
    else:
        tok = out / "tok"
        tok.mkdir()
        (tok / "tokenizer.model").write_bytes((sp_tokenizer_dir / "tokenizer.model").read_bytes())
    before = sorted(p.name for p in out.rglob("*"))
    with pytest.raises(FileExistsError, match=rf"refuses to delete output_dir=.*it holds {field}=.*(corpus|tok)"):
        recipe_cls(make_cfg(tiny_llama2_dir, tok, out, **over))
    assert sorted(p.name for p in out.rglob("*")) == before


@pytest.mark.parametrize("where", ["not_ours", "cwd", "git", "holds_start_checkpoint"])
def test_overwrite_deletes_only_what_the_recipe_made(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                     monkeypatch, where):
    out = tmp_path / "out"
    out.mkdir()
    (out / "precious.txt").write_text("keep me")
    ckpt = tiny_llama2_dir
    if where == "cwd":
        (out / ".longshort_output").write_text("")
        monkeypatch.chdir(out)
    elif where == "git":
        (out / ".longshort_output").write_text("")
        (out / ".git").mkdir()
    elif where == "holds_start_checkpoint":
        (out / ".longshort_output").write_text("")
        ckpt = out / "base"
        ckpt.mkdir()
        for f in tiny_llama2_dir.iterdir():
            (ckpt / f.name).write_bytes(f.read_bytes())
    cfg = make_cfg(ckpt, sp_tokenizer_dir, out, overwrite_output_dir=True)
    with pytest.raises(FileExistsError, match="refuses to delete"):
        recipe_cls(cfg).setup()
    assert (out / "precious.txt").read_text() == "keep me"
    assert not (out / ".lock").exists()


def test_overwrite_replaces_a_folder_the_recipe_made(recipe_cls, tmp_path, tiny_llama2_dir, sp_tokenizer_dir):
    out = tmp_path / "out"
    out.mkdir()
    (out / ".longshort_output").write_text("")
    (out / "step_7").mkdir()  # an earlier run's checkpoint: the recipe wrote it (and its list), overwrite replaces it
    (out / "step_7" / "config.json").write_text("{}\n")
    (out / "step_7" / ".longshort_files").write_text('["config.json"]\n')
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1)
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    assert not (out / "step_7").exists() and (out / ".longshort_output").is_file()
    # the metric logger's folder lists what the run's logger wrote there; a note put beside the logs is a user's:
    # overwrite refuses, naming it (it checked the folder's name only, and deleted the note with the logs)
    logs = out / "logs"
    written = sorted(p.name for p in logs.iterdir() if p.name != ".longshort_files")
    assert written and json.loads((logs / ".longshort_files").read_text()) == written
    (logs / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"refuses to delete .*it holds 'logs/notes.txt', which this recipe did "
                                              "not write"):
        recipe_cls(cfg).setup()
    assert (logs / "notes.txt").read_text() == "mine" and not (out / ".lock").exists()
    (logs / "notes.txt").unlink()
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    now = sorted(p.name for p in logs.iterdir() if p.name != ".longshort_files")
    assert now and json.loads((logs / ".longshort_files").read_text()) == now  # the new run's log alone


def _tree(folder):
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_overwrite_keeps_the_earlier_run_when_the_new_setup_refuses(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                    sp_tokenizer_dir):
    """``overwrite_output_dir=True`` deleted the earlier run when the folder was claimed, before the model was built
    and its start weights read: a model that does not build, or weights that cannot be read, then refused the new
    run with the earlier one gone. Now the earlier run goes at the new run's first write, once setup has passed."""
    out = tmp_path / "out"
    r = recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1))
    r.setup()
    r.release_output_dir()
    before = _tree(out)
    broken = tmp_path / "broken"  # the start checkpoint with a truncated weight file
    broken.mkdir()
    for f in tiny_llama2_dir.iterdir():
        if f.is_file():
            data = f.read_bytes()
            (broken / f.name).write_bytes(data[: len(data) // 2] if f.suffix == ".safetensors" else data)
    scratch = {"_component_": "torchtune_longshort.models.hf_decoder", "family": "llama", "vocab_size": 512,
               "num_layers": 1, "num_heads": 4, "num_kv_heads": 3, "embed_dim": 64, "max_seq_len": 256}
    short = tmp_path / "short.txt"  # fewer tokens than one sample
    short.write_text("x = 1\n")
    for cfg, match in [(make_cfg(broken, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1),
                        "cannot read weight file"),
                       (make_cfg(None, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1, model=scratch),
                        r"num_heads=4 is not divisible by num_kv_heads=3"),  # from scratch: the config check
                       # from scratch, refused once the model is built: the earlier run was deleted when step_0 was
                       # written, before the setup's later checks (this one, the data's)
                       # (a position_sampler past the model's positions was this case: the config check refuses
                       # it now)
                       (make_cfg(None, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1,
                                 model={**scratch, "num_kv_heads": 2}, dataset={
                                     "_component_": "torchtune_longshort.data.corpus.local_text",
                                     "path": str(short)}), "fewer than one sample of seq_len")]:
        with pytest.raises(ValueError, match=match):
            recipe_cls(cfg).setup()
        assert _tree(out) == before
    r = recipe_cls(make_cfg(None, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1,
                            model={**scratch, "num_kv_heads": 2}))  # the same, mended
    r.setup()
    r.release_output_dir()
    assert [p.name for p in out.glob("step_*")] == ["step_0"] and len(list((out / "logs").glob("log_*"))) == 1


def test_a_log_dir_inside_an_input_is_refused_before_anything_is_written(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                         sp_tokenizer_dir):
    # metric_logger.log_dir naming the start checkpoint's folder (or a data folder) wrote log_<time>.txt among the
    # files the run reads (a local_text corpus would read it as training text)
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", max_steps=1,
                   **{"metric_logger.log_dir": str(tiny_llama2_dir / "logs")})
    before = sorted(p.name for p in tiny_llama2_dir.iterdir())
    mtime = tiny_llama2_dir.stat().st_mtime_ns  # the folder is not even written and cleaned (a probe that it takes
    with pytest.raises(ValueError, match=r"^metric_logger.log_dir=.* lies inside checkpoint_dir=.*, which this run "
                                         "reads"):  # new folders made and removed one there, before this refusal)
        recipe_cls(cfg)
    assert sorted(p.name for p in tiny_llama2_dir.iterdir()) == before and not (tmp_path / "out").exists()
    assert tiny_llama2_dir.stat().st_mtime_ns == mtime


def test_an_output_dir_inside_an_input_is_refused_before_anything_is_written(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                            sp_tokenizer_dir):
    # only the log folder was checked: output_dir inside the corpus folder (log_dir elsewhere) wrote the run there,
    # and the next run read its metrics.jsonl as training data ("corp/run1/metrics.jsonl:1: no text field 'text'");
    # output_dir inside the start checkpoint wrote a whole model among its files
    corpus = tmp_path / "corp"
    corpus.mkdir()
    (corpus / "a.txt").write_text("x = 1\n" * 4000)
    data = {"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(corpus)}
    logs = {"metric_logger.log_dir": str(tmp_path / "logs")}
    before = sorted(p.name for p in tiny_llama2_dir.iterdir())
    for out, field in ((corpus / "run1", "dataset.path"), (tiny_llama2_dir / "out", "checkpoint_dir"),
                       (tiny_llama2_dir, "checkpoint_dir")):
        cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1, dataset=data, **logs)
        with pytest.raises(ValueError, match=rf"^output_dir=.* (lies inside|is) {field}=.*, which this run reads"):
            recipe_cls(cfg)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["corp"] and [p.name for p in corpus.iterdir()] == ["a.txt"]
    assert sorted(p.name for p in tiny_llama2_dir.iterdir()) == before


def test_overwrite_replaces_an_earlier_runs_logs_under_another_log_dir(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                      sp_tokenizer_dir):
    """The earlier run logged to ``logs/``, the new one to ``tb/``: ``logs/`` was refused as a folder the recipe did
    not write. A top-level folder with the recipe's ``.longshort_files`` is an earlier run's log folder: replaced
    when it holds only what it lists, a note beside the logs still refused by name."""
    out = tmp_path / "out"
    r = recipe_cls(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1))
    r.setup()
    r.release_output_dir()
    assert any((out / "logs").glob("log_*"))
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, max_steps=1, overwrite_output_dir=True,
                   **{"metric_logger.log_dir": str(out / "tb")})
    (out / "logs" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"it holds 'logs/notes.txt', which this recipe did not write"):
        recipe_cls(cfg)
    (out / "logs" / "notes.txt").unlink()
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    assert not (out / "logs").exists() and any((out / "tb").glob("log_*"))


def test_overwrite_replaces_a_run_whose_logs_lie_at_the_top_of_its_folder(recipe_cls, tmp_path, tiny_llama2_dir,
                                                                         sp_tokenizer_dir):
    """``metric_logger.log_dir`` = ``output_dir`` (torchtune's older configs): the folder's ``.longshort_files``
    lists the logger's files there, so overwrite replaces the run (it refused, naming the log it took for a user's)
    and still refuses a note a user put beside them, by name."""
    out = tmp_path / "out"
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, overwrite_output_dir=True, max_steps=1,
                   **{"metric_logger.log_dir": str(out)})
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    logged = json.loads((out / ".longshort_files").read_text())
    assert logged and all(n.startswith("log_") and (out / n).is_file() for n in logged)  # DiskLogger's log_<time>.txt
    (out / "notes.txt").write_text("mine")
    (out / "drafts").mkdir()  # an empty folder of the user's holds no file, but it is no log either
    with pytest.raises(FileExistsError, match=r"refuses to delete .*it holds 'drafts', 'notes.txt', which this recipe "
                                              "did not write"):
        recipe_cls(cfg).setup()
    assert (out / "notes.txt").read_text() == "mine" and not (out / ".lock").exists()
    (out / "notes.txt").unlink()
    (out / "drafts").rmdir()
    r = recipe_cls(cfg)
    r.setup()
    r.release_output_dir()
    now = sorted(p.name for p in out.iterdir() if p.name.startswith("log_"))
    assert now and json.loads((out / ".longshort_files").read_text()) == now  # the new run's log alone


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
        "(checkpointer.checkpoint_dir), the data or optimizer.lr; mend it, then start again with "
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
    with pytest.raises(FileNotFoundError, match="leaves only step_0: start it again with overwrite_output_dir=True"):
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


# ---------------------------------------------------------------- data read before step 1 (records: test_data_records.py)
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
    from torchtune_longshort.models.hf_checkpoint import load_hf_state_dict, read_hf_config
    from torchtune_longshort.models.hf_checkpoint_writer import write_hf_checkpoint
    from torchtune.models.convert_weights import hf_to_tune
    from torchtune_longshort.training.checkpointing import StepCheckpoints, recipe_state_path

    cfg = read_hf_config(tiny_llama2_dir)
    sd = hf_to_tune(load_hf_state_dict(tiny_llama2_dir), num_heads=cfg["num_attention_heads"],
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
