"""The eleven faults of the reliability probe (issue 33), one test each: nothing a user made is deleted, and bad input
is refused before any side effect with the field and the fix named, so that the corrected rerun just works.

In-process and cheap: every refusal here is found before a weight is loaded or a step is trained (the tiny config
at ``max_steps=2 seq_len=64 batch_size=2 validation=null``), and each test asserts that nothing was deleted and,
where the run is refused, that no output folder exists.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from run_folders import REPO, TINY, recipe_made, tiny_cfg, tree


@pytest.fixture(scope="module")
def recipe_cls():
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    return LongShortFinetuneRecipe


# ---------------------------------------------------------------------------------------------------------- F3
@pytest.mark.parametrize("what", ["cwd", "home", "user_file"])
def test_f3_overwrite_keeps_a_folder_holding_the_working_directory_home_or_a_user_file(
        recipe_cls, tmp_path, sp_tokenizer_dir, monkeypatch, what):
    """F3: a recipe-made folder with the working directory, ``$HOME`` or a file of the user's inside is not
    deleted by ``overwrite_output_dir=True`` (the check was equality with cwd/HOME, not containment)."""
    run = recipe_made(tmp_path / "run")
    sub = run / "sub"
    sub.mkdir()
    (sub / "notes.txt").write_text("hi")
    if what == "cwd":
        monkeypatch.chdir(sub)
    elif what == "home":
        monkeypatch.setenv("HOME", str(sub))
    before = tree(run)
    match = {"cwd": "contains the working directory", "home": r"contains \$HOME",
             "user_file": "holds 'sub', which this recipe did not write"}[what]
    with pytest.raises(FileExistsError, match=rf"output_dir=.*run'.*{match}"):
        recipe_cls(tiny_cfg(run, sp_tokenizer_dir, overwrite_output_dir=True)).setup()
    assert tree(run) == before and (sub / "notes.txt").read_text() == "hi"


def test_overwrite_keeps_another_runs_output_folder_inside_a_step_folder(recipe_cls, tmp_path, sp_tokenizer_dir):
    """A run whose output_dir lay inside this run's ``step_1`` (its checkpoint_dir) is not deleted with this run's
    folder by ``overwrite_output_dir=True`` (only the top-level names were checked)."""
    run = recipe_made(tmp_path / "run")
    other = recipe_made(run / "step_1" / "sub")
    before = tree(run)
    with pytest.raises(FileExistsError, match=r"refuses to delete output_dir=.*run'.*'step_1/sub', the output folder of "
                                              "another run"):
        recipe_cls(tiny_cfg(run, sp_tokenizer_dir, overwrite_output_dir=True)).setup()
    assert tree(run) == before and (other / "metrics.jsonl").is_file()


# ---------------------------------------------------------------------------------------------------------- F2
def test_f2_overwrite_keeps_a_tokenizer_second_file_inside_output_dir(recipe_cls, tmp_path, sp_tokenizer_dir):
    """F2: a Qwen2 tokenizer's ``merges_file`` inside ``output_dir`` is an input like its ``path``: overwrite is
    refused naming that field, before anything is built."""
    vocab = tmp_path / "vocab.json"
    vocab.write_text(json.dumps({"a": 0, "b": 1, "ab": 2, "c": 3, "\u0120": 4}))
    run = recipe_made(tmp_path / "run")
    merges = run / "merges.txt"
    merges.write_text("#version: 0.2\na b\n")
    data = tmp_path / "d.jsonl"
    data.write_text(json.dumps({"text": "ab c " * 400}) + "\n")
    cfg = tiny_cfg(run, sp_tokenizer_dir, overwrite_output_dir=True,
                   tokenizer={"_component_": "torchtune.models.qwen2.qwen2_tokenizer", "path": str(vocab),
                              "merges_file": str(merges)},
                   dataset={"_component_": "torchtune_longshort.data.corpus.local_text", "path": str(data)})
    before = tree(run)
    with pytest.raises(FileExistsError, match=r"refuses to delete output_dir=.*it holds tokenizer.merges_file=.*merges"):
        recipe_cls(cfg).setup()
    assert tree(run) == before and merges.read_text() == "#version: 0.2\na b\n"


# ---------------------------------------------------------------------------------------------------------- F1
def _yarn(inner, **extra):
    return {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn", "max_seq_len": 1024,
            "model": inner, **extra}


def test_f1_rope_argument_typo_is_refused_before_the_folder_and_the_fix_then_runs(recipe_cls, tmp_path,
                                                                                  sp_tokenizer_dir):
    """F1: ``model.factr=2`` (``rope_scaled``) is refused by the method's signature before any folder exists (it
    was refused at the model build, and the marker folder left behind blocked the corrected rerun)."""
    out = tmp_path / "run"
    inner = dict(OmegaConf.to_container(OmegaConf.load(TINY).model))
    bad, good = _yarn(inner, factr=2), _yarn(inner, factor=2)
    match = r"model.factr=2 is not an argument of RoPE method 'yarn' \(did you mean 'factor'\?\)"
    with pytest.raises(ValueError, match=match):
        recipe_cls(tiny_cfg(out, sp_tokenizer_dir, model=bad)).setup()
    assert not out.exists()
    r = recipe_cls(tiny_cfg(out, sp_tokenizer_dir, model=good))
    r.setup()
    r.release_output_dir()
    assert r.rope_spec["method"] == "yarn" and (out / "step_0").is_dir()


def test_a_key_misplaced_by_one_level_is_refused_naming_where_it_goes(tmp_path, sp_tokenizer_dir):
    """``model.lora_rank`` on a ``rope_scaled`` wrapper was "not an argument of RoPE method 'yarn'"; a top-level
    ``lora_rank`` and a ``train_embeddings_and_norms`` in a model node got only the list of accepted keys. The
    reference: where the shipped configs put them (lora_yarn_16k_stdlib.yaml: model.model.lora_rank)."""
    from torchtune_longshort.training.recipe_config import load_recipe_config

    inner = dict(OmegaConf.to_container(OmegaConf.load(TINY).model))
    cases = [
        ({"model": _yarn(inner, lora_rank=8)}, ValueError,
         r"^model.lora_rank=8 is not an argument of RoPE method 'yarn' \(did you mean 'model.model.lora_rank'\? the "
         r"model it wraps takes it: LoRA keys go under model.model\): it takes \["),
        ({"model": _yarn(inner), "lora_rank": 8}, KeyError,
         r"at the top level: 'lora_rank' \(did you mean 'model.model.lora_rank'\? it is read there\)\. Accepted"),
        ({"lora_rank": 8}, KeyError, r"at the top level: 'lora_rank' \(did you mean 'model.lora_rank'\?"),
        ({"model": _yarn({**inner, "train_embeddings_and_norms": True})}, KeyError,
         r"in model.model: 'model.model.train_embeddings_and_norms' \(did you mean 'train_embeddings_and_norms'\? a "
         r"top-level key\)"),
        ({"model": _yarn({**inner, "lora_rnak": 8})}, KeyError, r"'model.model.lora_rnak' \(did you mean 'lora_rank'"),
        # on the rope_scaled wrapper itself: "not an argument of RoPE method 'yarn'", with no word of where it goes
        ({"model": _yarn(inner, train_embeddings_and_norms=True)}, KeyError,
         r"^unknown config key\(s\) in model: 'model.train_embeddings_and_norms' \(did you mean "
         r"'train_embeddings_and_norms'\? a top-level key\)\. Accepted in model: _component_, alpha, .*method, model"),
        ({"model": _yarn(inner, zzz=1)}, ValueError, r"^model.zzz=1 is not an argument of RoPE method 'yarn': it"),
    ]
    for over, exc, match in cases:
        with pytest.raises(exc) as err:
            load_recipe_config(tiny_cfg(tmp_path / "run", sp_tokenizer_dir, **over))
        assert __import__("re").search(match, str(err.value)), str(err.value)
    assert not (tmp_path / "run").exists()


def test_f1_a_folder_a_refused_setup_made_is_taken_back_and_a_user_file_kept(tmp_path):
    """F1's leftover: a setup refused after its folder was claimed gives the folder back (the rerun finds none);
    a folder that existed before, or that holds a file the recipe does not write, is kept."""
    from torchtune_longshort.training.output_dir import claim_output_dir

    new = tmp_path / "new"
    claim_output_dir(new, resume=False, overwrite=False).release(discard=True)
    assert not new.exists()
    kept = tmp_path / "kept"
    lock = claim_output_dir(kept, resume=False, overwrite=False)
    (kept / "notes.txt").write_text("mine")
    lock.release(discard=True)
    assert (kept / "notes.txt").read_text() == "mine" and not (kept / ".lock").exists()


# ---------------------------------------------------------------------------------------------------------- F6
def test_f6_tokenizer_past_the_model_vocabulary_is_refused_before_the_folder(recipe_cls, tmp_path, sp_tokenizer_dir):
    """F6: a tokenizer with more ids than the model's ``vocab_size`` is refused from the config's declared size,
    before the folder is claimed (it was found after the build, and from scratch after step_0 was written)."""
    out = tmp_path / "run"
    with pytest.raises(ValueError, match=r"tokenizer vocabulary \(512 ids.*256 rows: model.vocab_size=256\)"):
        recipe_cls(tiny_cfg(out, sp_tokenizer_dir, **{"model.vocab_size": 256})).setup()
    assert not out.exists()


def test_f6_validation_larger_than_its_data_is_refused_before_the_folder(recipe_cls, tmp_path, sp_tokenizer_dir):
    """F6: ``validation.num_sequences`` past what its source holds is refused naming the field, before the folder
    is claimed."""
    out = tmp_path / "run"
    val = {"dataset": {"_component_": "torchtune_longshort.data.corpus.stdlib", "limit": 1}, "seq_len": 64,
           "num_sequences": 100000}
    with pytest.raises(ValueError, match=r"validation.num_sequences=100000 at validation.seq_len=64: .*holds only"):
        recipe_cls(tiny_cfg(out, sp_tokenizer_dir, validation=val)).setup()
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------------- F7
def test_f7_model_dimensions_against_the_checkpoint_are_named_before_the_folder(recipe_cls, tmp_path,
                                                                               tiny_llama2_dir, sp_tokenizer_dir):
    """F7: model dimensions that differ from the start checkpoint's ``config.json`` are refused naming each key and
    both values, in the config check (torch's raw ``size mismatch`` list came after the folder was claimed)."""
    from recipe_config import make_cfg

    out = tmp_path / "run"
    model = {"_component_": "torchtune_longshort.models.hf_decoder", "family": "llama_tied", "vocab_size": 512,
             "num_layers": 3, "num_heads": 4, "num_kv_heads": 2, "embed_dim": 128, "max_seq_len": 256}
    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, model=model)
    with pytest.raises(ValueError, match=r"model dimensions differ from the start checkpoint .*model.family="
                                         r"'llama_tied' \(its config.json: 'llama'\), model.num_layers=3 "
                                         r"\(its config.json: 2\), model.embed_dim=128 \(its config.json: 64\)"):
        recipe_cls(cfg).setup()
    assert not out.exists()


# ---------------------------------------------------------------------------------------------------------- F4
def test_f4_home_relative_and_symlinked_paths_are_resolved_once(recipe_cls, tmp_path, sp_tokenizer_dir,
                                                                monkeypatch):
    """F4: ``output_dir=~/runs/x`` writes to ``$HOME/runs/x`` (it made a literal ``./~/runs/x``), and so do the
    nodes that interpolate it; ``tokenizer.path=~/tok`` (a symlink) is read through the same resolution."""
    home, work = tmp_path / "home", tmp_path / "work"
    home.mkdir()
    work.mkdir()
    (home / "tok").symlink_to(sp_tokenizer_dir)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(work)
    r = recipe_cls(tiny_cfg("~/runs/x", "~/tok"))
    run = home / "runs" / "x"
    assert r.output_dir == run and r.cfg.checkpointer.output_dir == str(run)
    assert r.config.metric_logger.log_dir == str(run / "logs")
    assert r.config.tokenizer.path == str(sp_tokenizer_dir.resolve())
    r.setup()
    r.release_output_dir()
    assert (run / "step_0").is_dir() and list(work.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------- F8
def test_f8_a_re_spelled_symlinked_or_moved_run_folder_resumes(recipe_cls, tmp_path, sp_tokenizer_dir,
                                                                monkeypatch):
    """F8: resume compares what a run trains, not where its folder sits: a run started as ``output_dir=outputs/r``
    resumes as its absolute path, through a symlink and after the folder is moved (``checkpointer.output_dir``,
    ``${output_dir}``, was compared as a must-match key)."""
    import os

    monkeypatch.chdir(tmp_path)
    first = recipe_cls(tiny_cfg("outputs/r", sp_tokenizer_dir, max_steps=1))
    first.setup()
    first.train()
    first.cleanup()
    (tmp_path / "link").symlink_to(tmp_path / "outputs" / "r")
    spellings = [str(tmp_path / "outputs" / "r"), "link"]
    for spelling in spellings + ["moved"]:
        if spelling == "moved":
            os.rename(tmp_path / "outputs" / "r", tmp_path / "moved")
        r = recipe_cls(tiny_cfg(spelling, sp_tokenizer_dir, max_steps=1, resume=True))
        r.setup()
        r.release_output_dir()
        assert r.global_step == 1 and r._resume_changes == [], spelling
    with pytest.raises(ValueError, match=r"changes what the run trains.*seed: 0 -> 1"):  # what it trains still counts
        recipe_cls(tiny_cfg("moved", sp_tokenizer_dir, max_steps=1, resume=True, seed=1)).setup()


# --------------------------------------------------------------------------------------------------------- F10
F10_CASES = {
    "output_dir_a_file": ({"output_dir": "{file}"}, r"output_dir='.*notes.txt' is a file, not a folder"),
    "output_dir_under_a_file": ({"output_dir": "{file}/run"}, r"output_dir='.*notes.txt/run' cannot be created: "
                                                              r"'.*notes.txt' is a file"),
    "output_dir_in_proc": ({"output_dir": "/proc/longshort_run"}, r"output_dir='/proc/longshort_run' cannot be "
                                                                  r"created: '/proc' does not take new folders"),
    "tokenizer_in_proc": ({"tokenizer.path": "/proc/nonexistent"}, r"tokenizer.path='/proc/nonexistent' cannot be "
                                                                   r"created: '/proc' does not take new folders"),
    "log_dir_in_proc": ({"metric_logger.log_dir": "/proc/logs"}, r"metric_logger.log_dir='/proc/logs' cannot be"),
    # an existing folder that takes no file: the logger's traceback once the run had claimed its folder
    "log_dir_is_proc": ({"metric_logger.log_dir": "/proc"}, r"metric_logger.log_dir='/proc' does not take new files"),
    "device_mps": ({"device": "mps"}, r"device='mps': MPS is not available on this machine; pass device=cpu"),
}


@pytest.mark.parametrize("case", list(F10_CASES))
def test_f10_filesystem_and_device_refusals_name_the_field_in_one_line(recipe_cls, tmp_path, sp_tokenizer_dir,
                                                                       capsys, case):
    """F10: a path the config gives that cannot be a folder, and a device this machine lacks, are refused in one
    line naming the field and the fix (they were NotADirectoryError / FileNotFoundError on a temporary name /
    torchtune's RuntimeError), before any folder exists."""
    import torch

    from torchtune_longshort.refusals import refusing

    if case == "device_mps" and torch.backends.mps.is_available():
        pytest.skip("this machine has MPS")
    user_file = tmp_path / "notes.txt"
    user_file.write_text("mine")
    over, match = F10_CASES[case]
    over = {k: v.format(file=user_file) for k, v in over.items()}
    cfg = tiny_cfg(over.pop("output_dir", tmp_path / "run"), sp_tokenizer_dir, **over)
    with pytest.raises(SystemExit) as stop:
        refusing("longshort_finetune", lambda: recipe_cls(cfg).setup())
    err = capsys.readouterr().err.strip()
    assert stop.value.code == 2 and len(err.splitlines()) == 1, err
    assert __import__("re").search(match, err), err
    assert user_file.read_text() == "mine" and sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert not Path("/proc/longshort_run").exists()


def test_an_output_dir_that_takes_no_file_is_refused_before_anything_is_read(recipe_cls, tmp_path, sp_tokenizer_dir,
                                                                              monkeypatch):
    """An existing, empty output_dir on a read-only disk was asked only whether it is a folder: the run read its
    tokenizer and data, then ended in a traceback at its lock ("[Errno 30] Read-only file system: '.../.lock'")."""
    import torchtune_longshort.config.values as values

    ro = tmp_path / "ro"
    ro.mkdir()
    probe = values._refuses_new_folder
    monkeypatch.setattr(values, "_refuses_new_folder", lambda f: "Read-only file system" if f == ro else probe(f))
    with pytest.raises(PermissionError, match=r"^output_dir='.*ro' does not take new files \(Read-only file system\)"):
        recipe_cls(tiny_cfg(ro, sp_tokenizer_dir))
    assert list(ro.iterdir()) == []


# ---------------------------------------------------------------------------------------------------------- F5
@pytest.mark.parametrize("overrides,match", [
    ({"seq_len": 100000}, r"seq_len=100000 is above the range of the model's RoPE"),
    ({"gradient_accumulation_steps": 3}, r"batch_size=4 is not divisible by world_size \(1\) x "
                                         r"gradient_accumulation_steps \(3\)"),
], ids=["seq_len", "accumulation"])
def test_f5_the_study_runs_the_recipe_config_check_on_every_run_before_the_base_trains(tmp_path, overrides, match):
    """F5: a ``finetune.overrides`` value the recipe's rules refuse (a length past the scaled model's positions, a
    batch the accumulation steps do not divide) stops the study when its config is loaded (exit 2), not after the
    base has pre-trained and every fine-tune has failed."""
    import yaml

    from torchtune_longshort.study import load_study_config

    raw = yaml.safe_load((REPO / "configs" / "study" / "cpu_small.yaml").read_text())
    raw["finetune"]["overrides"].update(overrides)
    raw["output_dir"] = str(tmp_path / "study")
    path = tmp_path / "study.yaml"
    path.write_text(yaml.safe_dump(raw))
    with pytest.raises(ValueError, match=rf"recipe config of run \w+_a0_s0 .*finetune.overrides.* {match}"):
        load_study_config(path, repo_root=REPO)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["study.yaml"]


# ---------------------------------------------------------------------------------------------------------- F9
@pytest.mark.parametrize("model", ["hf", "longshort"])
def test_f9_an_absent_device_in_model_args_is_refused_in_one_line_before_work(tmp_path, capsys, monkeypatch, model):
    """F9: the one device rule holds for a device given in ``--model_args`` too (``--device`` is
    tests/test_device_rule.py's): ``hf`` got it twice (its own and the CLI's default) and raised a TypeError."""
    import sys

    import torch

    from torchtune_longshort.eval.__main__ import main

    absent = "cuda:99" if torch.cuda.is_available() else "cuda"
    monkeypatch.setattr(sys, "argv", ["longshort-eval", "run", "--model", model, "--model_args",
                                      f"pretrained={tmp_path / 'missing'},device={absent}", "--tasks",
                                      "longshort_ppl", "--output_path", str(tmp_path / "out")])
    with pytest.raises(SystemExit) as stop:
        main()
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert stop.value.code == 2 and len(err) == 1, err
    assert err[0].startswith(f"longshort-eval: error: --model_args device='{absent}': ") and "device=cpu" in err[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --------------------------------------------------------------------------------------------------------- F11
def test_f11_both_models_count_the_same_passkey_samples_and_the_report_refuses_unequal_counts(tmp_path,
                                                                                           sp_tokenizer_dir):
    """F11: a passkey length past lm-eval's ``hf`` model was one placeholder row there, while the ``longshort`` model
    got every prompt and refused each (``sample_len`` 6 against 10, and the report accepted both). Now each model's
    dataset holds the same rows (the ``hf`` model's past its length marked, never sent, NaN), and the report refuses
    runs whose counts differ, naming the task."""
    from torchtune_longshort.eval.report import build_report
    from torchtune_longshort.eval.tasks.common.unavailable import MODEL_KEY
    from torchtune_longshort.eval.tasks.passkey.task import passkey_dataset

    meta = {"max_seq_lengths": "256,512", "passkey_num_samples": 1, "tokenizer": str(sp_tokenizer_dir)}
    hf = passkey_dataset(**meta, **{MODEL_KEY: "hf", "max_length": 256})["test"]
    ours = passkey_dataset(**meta, **{MODEL_KEY: "longshort"})["test"]
    assert len(hf) == len(ours) == 10  # 2 lengths x 5 depths
    for a, b in zip(hf, ours):
        assert (a["length"], a["depth"], a["input"]) == (b["length"], b["depth"], b["input"]) and not b["error"]
        assert bool(a["error"]) == (a["length"] == 512), a["error"]
    assert "longshort_passkey at length 512: its requests need 512 tokens" in hf[9]["error"]

    def run(name, n):
        d = tmp_path / name
        d.mkdir()
        (d / "results_2026-01-01T00-00-00.json").write_text(json.dumps({
            "results": {"longshort_passkey": {"acc,none": 0.5}},
            "n-samples": {"longshort_passkey": {"original": n, "effective": n}},
            "configs": {"longshort_passkey": {"not_scored": {"longshort_passkey at length 512: too long": n - 5}}},
            "config": {"model": name, "model_args": {"pretrained": "/ckpt"}, "model_dtype": "torch.float32"}}))
        return d

    with pytest.raises(ValueError, match=r"different numbers of samples \(longshort_passkey: `hf` 6, `longshort` 10\)"):
        build_report([run("hf", 6), run("longshort", 10)], tmp_path / "report")
    assert not (tmp_path / "report").exists()
