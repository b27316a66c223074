"""What a resumed run may change is declared by each field of the typed recipe config (``setting(resume=...)``), and
``training/resume.py`` derives its keys from those declarations: a new field cannot be forgotten.

References: a real run of the tiny recipe resumed in-process with ``window_bos`` flipped (refused in one line that
names it, before any step), and the hand-kept list of must-match keys that the declarations replaced."""

from __future__ import annotations

import json
import shutil
from dataclasses import fields
from pathlib import Path

import pytest
from omegaconf import OmegaConf
from run_folders import aged, stat_tree

from torchtune_longshort.config.fields import RESUME_POLICIES, resume_policies
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.training.resume import RESUME_POLICY, compare_resume_config

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny" / "longshort_stdlib.yaml"
# The hand-kept list that the declarations replaced (training/resume.py:EXACT_KEYS before issue 35): each must still
# be refused on resume.
FORMER_EXACT_KEYS = (
    "model", "tokenizer", "checkpointer", "checkpoint_dir", "dataset", "seq_len", "e_range", "loss", "batch_size",
    "gradient_accumulation_steps", "seed", "data_seed", "position_sampler", "dtype", "lr_scheduler",
)


def _top_level_fields(cls):
    """``(yaml key, field)`` of every key a recipe config holds at its top level (flat sections' keys included)."""
    for f in fields(cls):
        if f.metadata.get("flat"):
            yield from _top_level_fields(f.metadata["section"])
        elif "doc" in f.metadata:
            yield f.metadata.get("key") or f.name, f


def test_every_top_level_field_declares_its_resume_policy():
    undeclared = [k for k, f in _top_level_fields(RecipeConfig) if f.metadata.get("resume") not in RESUME_POLICIES]
    assert undeclared == []
    keys = {k for k, _ in _top_level_fields(RecipeConfig)}
    assert keys <= set(RESUME_POLICY)  # resume.py reads every one of them
    assert RESUME_POLICY["window_bos"] == "exact"
    assert {k for k in FORMER_EXACT_KEYS if RESUME_POLICY[k] != "exact"} == set()
    assert RESUME_POLICY["checkpointer.output_dir"] == "ignored"  # torchtune's ${output_dir}: where, not what


def test_a_field_without_a_policy_is_refused_naming_it():
    from dataclasses import dataclass

    from torchtune_longshort.config.fields import Section, setting

    @dataclass(frozen=True)
    class Forgot(Section):
        kept: int = setting(1, doc="declared", resume="exact")
        new: int = setting(2, doc="a field added without a policy")

    with pytest.raises(TypeError, match=r"^Forgot\.new declares no resume policy: .*resume="):
        resume_policies(Forgot)


def test_compare_refuses_window_bos_applies_max_steps_and_reads_a_left_out_key_as_its_default():
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2}  # window_bos left out: its default, False
    assert compare_resume_config(saved, {**saved, "max_steps": 3}) == [("max_steps", 2, 3)]
    assert compare_resume_config(saved, {**saved, "window_bos": False, "log_every_n_steps": 1}) == []
    with pytest.raises(ValueError, match=r"window_bos: False -> True"):
        compare_resume_config(saved, {**saved, "window_bos": True})
    # shuffle picks the documents each step reads (a run saved before the key existed read them in order)
    assert compare_resume_config(saved, {**saved, "shuffle": False}) == []
    with pytest.raises(ValueError, match=r"shuffle: False -> True"):
        compare_resume_config(saved, {**saved, "shuffle": True})
    # loss.num_chunks changes the summation order and the peak memory only (it was refused: a run that needed more
    # chunks on another GPU could not continue); the loss's other arguments are what the run trains
    loss = {**saved, "loss": {"alpha": 0.1, "num_chunks": 4}}
    assert compare_resume_config(loss, {**loss, "loss": {"alpha": 0.1, "num_chunks": 8}}) == [("loss.num_chunks", 4, 8)]
    with pytest.raises(ValueError, match=r"loss\.alpha: 0\.1 -> 0\.2"):
        compare_resume_config(loss, {**loss, "loss": {"alpha": 0.2, "num_chunks": 4}})


@pytest.mark.parametrize("start", ["folder", "scratch"])
def test_a_rope_parameter_the_build_derives_compares_as_the_build_derives_it(start, tiny_llama2_dir):
    """A YaRN run whose factor was left out (derived: max_seq_len over the start's positions, 512/256) refused
    ``resume=True model.factor=2`` as ``model.factor: '<absent>' -> 2``, though the built model is the same. The
    left-out factor now compares as the build derives it from the node (never from the saved step): the equal value
    is no change, another is refused."""
    from torchtune import config as tt_config

    from torchtune_longshort.rope import rope_modules
    from torchtune_longshort.training.recipe_config.rope_node import HF_DECODER, ROPE_SCALED

    inner = {"_component_": HF_DECODER, "checkpoint_dir": str(tiny_llama2_dir)} if start == "folder" else {
        "_component_": HF_DECODER, "family": "llama", "vocab_size": 512, "num_layers": 1, "num_heads": 2,
        "num_kv_heads": 2, "embed_dim": 32, "max_seq_len": 256}
    node = {"_component_": ROPE_SCALED, "method": "yarn", "max_seq_len": 512, "model": inner}
    built = {m.factor for m in rope_modules(tt_config.instantiate(OmegaConf.create(node)))}  # the reference
    assert built == {2.0}
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "model": node}
    for given in (2, 2.0):
        assert compare_resume_config(saved, {**saved, "model": {**node, "factor": given}}) == []
        assert compare_resume_config({**saved, "model": {**node, "factor": given}}, saved) == []
    with pytest.raises(ValueError, match=r"model\.factor: 2\.0 -> 3"):
        compare_resume_config(saved, {**saved, "model": {**node, "factor": 3}})
    # a longer target without a factor derives another one: refused as before
    with pytest.raises(ValueError, match=r"model\.factor: 2\.0 -> 4\.0.*model\.max_seq_len: 512 -> 1024"):
        compare_resume_config(saved, {**saved, "model": {**node, "max_seq_len": 1024}})


@pytest.mark.parametrize("spelled", [float("inf"), "inf", ".inf", "Infinity"], ids=["yaml_inf", "inf", "dot_inf",
                                                                                   "Infinity"])
def test_a_top_level_value_compares_as_the_typed_config_reads_it(spelled):
    """``clip_grad_norm: inf`` (or ``.inf``) in one config and ``null`` or left out in the other mean the same, no
    clipping (RecipeConfig's check reads inf as null): the resume logged ``clip_grad_norm changed 'inf' -> None
    (applied)``. Each top-level value is now compared as the field's check reads it."""
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "clip_grad_norm": None}
    assert compare_resume_config(saved, {**saved, "clip_grad_norm": spelled}) == []
    assert compare_resume_config({**saved, "clip_grad_norm": spelled}, {k: v for k, v in saved.items()
                                                                        if k != "clip_grad_norm"}) == []
    assert compare_resume_config(saved, {**saved, "clip_grad_norm": 1}) == [("clip_grad_norm", None, 1.0)]
    # a value the check refuses (a config an older version saved) is compared as given
    assert compare_resume_config({**saved, "clip_grad_norm": -1}, saved) == [("clip_grad_norm", -1, None)]


def test_an_argument_spelled_at_its_default_compares_equal_to_it_left_out():
    """``model.act=silu`` on resuming a CLEX run whose node left ``act`` out (trained under silu) was refused
    (``model.act: '<absent>' -> 'silu'``), as was any component argument spelled at its default. An absent argument
    now reads as what the build used: the component's default, and a learned RoPE setting the resumed step's
    ``longshort_rope`` (a CLEX start checkpoint's tanh is not silu). References: the signatures of CLEXRoPE and
    torchtune_longshort.data.corpus.stdlib, and the step specs a CLEX run writes."""
    inner = {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "start"}
    clex = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "clex", "max_seq_len": 1024,
            "model": inner}
    data = {"_component_": "torchtune_longshort.data.corpus.stdlib", "split": "train"}
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "model": clex, "dataset": data}
    spec = {"method": "clex", "t_max": 2, "param_factor": 1, "act": "silu", "time_dt": 0.01, "log_scale": False}
    explicit = {**saved, "model": {**clex, "act": "silu", "t_min": 1, "model": {**inner, "plain_rope": False}},
                "dataset": {**data, "include_tests": True}}
    assert compare_resume_config(saved, explicit, spec) == []
    with pytest.raises(ValueError, match=r"resume=True .*: model\.act: 'silu' -> 'tanh'\. Resume with"):
        compare_resume_config(saved, {**saved, "model": {**clex, "act": "tanh"}}, spec)
    with pytest.raises(ValueError, match=r"dataset\.include_tests: True -> False"):
        compare_resume_config(saved, {**saved, "dataset": {**data, "include_tests": False}}, spec)
    # the run started from a CLEX checkpoint trained under tanh and kept it: act left out was tanh, not silu
    tanh_step = {**spec, "act": "tanh"}
    assert compare_resume_config(saved, {**saved, "model": {**clex, "act": "tanh"}}, tanh_step) == []
    with pytest.raises(ValueError, match=r"model\.act: 'tanh' -> 'silu'"):
        compare_resume_config(saved, explicit, tanh_step)
    # a default apply_rope_scaling derives when left out (the factor L'/L) is not the class's (Llama3RoPE's 8.0)
    llama3 = {**saved, "model": {**clex, "method": "llama3", "max_seq_len": 4096}}
    assert compare_resume_config(llama3, {**llama3, "model": {**llama3["model"], "high_freq_factor": 4.0}}) == []
    with pytest.raises(ValueError, match=r"model\.factor: '<absent>' -> 8\.0"):
        compare_resume_config(llama3, {**llama3, "model": {**llama3["model"], "factor": 8.0}})
    # an optimizer argument at its default: no change to log (AdamW's betas as YAML spells the tuple)
    opt = {**saved, "optimizer": {"_component_": "torch.optim.AdamW", "lr": 1e-3}}
    assert compare_resume_config(opt, {**opt, "optimizer": {**opt["optimizer"], "betas": [0.9, 0.999],
                                                            "weight_decay": 0.01}}, spec) == []



def test_a_component_argument_set_to_null_is_not_read_as_its_default():
    """null is handed to the component as it is (torchtune's text_completion_dataset with ``split=None`` loads every
    split; AdamW's ``weight_decay=None``): the default fill read it as the default, so ``dataset.split: null`` over a
    run trained on 'train' was no change, and ``optimizer.weight_decay: null`` logged ``0.1 -> 0.01``."""
    data = {"_component_": "torchtune.datasets.text_completion_dataset", "source": "text", "data_files": "a.txt"}
    opt = {"_component_": "torch.optim.AdamW", "lr": 1e-3, "weight_decay": 0.1}
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "dataset": data, "optimizer": opt}
    with pytest.raises(ValueError, match=r"dataset\.split: 'train' -> None"):
        compare_resume_config(saved, {**saved, "dataset": {**data, "split": None}})
    assert compare_resume_config(saved, {**saved, "optimizer": {**opt, "weight_decay": None}}) == [
        ("optimizer.weight_decay", 0.1, None)]
    # null where the default is null, and a rope_scaled node's null (a setting left out), still equal the default
    assert compare_resume_config(saved, {**saved, "dataset": {**data, "filter_fn": None}}) == []
    clex = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "clex", "max_seq_len": 1024,
            "model": {"_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": "start"}}
    rope = {**saved, "model": clex}
    assert compare_resume_config(rope, {**rope, "model": {**clex, "t_min": None}}) == []

def _tiny_cfg(out, tokenizer_dir, **over):
    cfg = OmegaConf.load(TINY)
    cfg.output_dir = str(out)
    cfg.tokenizer.path = str(tokenizer_dir)
    small = {"max_steps": 1, "seq_len": 64, "batch_size": 2, "validation": None, "loss.alpha": 0.0}
    for k, v in {**small, **over}.items():
        OmegaConf.update(cfg, k, v, force_add=True)
    return cfg


def test_a_resume_that_flips_window_bos_is_refused_naming_it(tmp_path, sp_tokenizer_dir, monkeypatch, capsys):
    """Pre-training with BOS over each window's first token trains other inputs than without: a resume that flips
    it would silently train another run (the hand-kept list lacked it, and the flip was applied)."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run = tmp_path / "run"
    first = LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir))
    first.setup()
    first.train()
    first.cleanup()
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    stats = aged(run)
    with pytest.raises(ValueError) as err:  # by the constructor: before the setup reads the tokenizer and data
        LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, resume=True, window_bos=True))
    message = str(err.value)
    assert "\n" not in message
    assert "window_bos: False -> True" in message and "changes what the run trains" in message
    # nothing written, nothing removed, no mtime changed: refused before the lock file (it made and removed it, which
    # set output_dir's mtime)
    assert stat_tree(run) == stats
    # longshort-validate compares the same way (it said OK), and names what a resume applies
    from torchtune_longshort.training.recipe_config.validate import validate

    yaml_file = tmp_path / "resume.yaml"
    OmegaConf.save(_tiny_cfg(run, sp_tokenizer_dir, resume=True, window_bos=True), yaml_file)
    with pytest.raises(ValueError, match=r"changes what the run trains.*window_bos: False -> True"):
        validate(str(yaml_file), [])
    applied: list = []
    validate(str(yaml_file), ["window_bos=false", "max_steps=3"], applied=applied)
    assert applied == ["max_steps: 1 -> 3"]
    # a process count that does not divide the run's batch_size=2: the refusal advised another batch_size (a multiple
    # of 3), which the resume then refused; it names the counts that can continue the run, in both commands
    fixed = r"^batch_size=2 is fixed for this run: resume=True .*--nproc_per_node 1 or 2 \(the process counts"
    for given in ("batch_size=2", "batch_size=3"):
        with pytest.raises(ValueError, match=fixed):
            validate(str(yaml_file), ["window_bos=false", given], world_size=3)
    monkeypatch.setenv("WORLD_SIZE", "3")  # checked in the recipe's constructor, before any process group
    with pytest.raises(ValueError, match=fixed):
        LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, resume=True, batch_size=3))
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before
    # Ctrl-C while the resume sets up: the run it resumes is left as it was, and the line says so (it said the
    # setup's output folder was taken back)
    import signal

    from torchtune_longshort.recipes.longshort_finetune import recipe_main
    from torchtune_longshort.refusals import Stopped

    monkeypatch.delenv("WORLD_SIZE")
    def stop(self, recipe_state):
        raise Stopped(signal.SIGINT)

    monkeypatch.setattr(LongShortFinetuneRecipe, "_setup_model", stop)
    monkeypatch.setattr("sys.argv", ["longshort_finetune.py", "--config", str(yaml_file), "window_bos=false",
                                     "max_steps=2"])
    with pytest.raises(SystemExit) as stop:
        recipe_main()
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert stop.value.code == 128 + signal.SIGINT and "a run it resumes is untouched" in line, line
    assert stat_tree(run) == stats  # its lock file made and removed: the folder's mtime put back


def _train(cfg):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run = LongShortFinetuneRecipe(cfg)
    run.setup()
    run.train()
    run.cleanup()
    return run


def _losses(out: Path) -> list:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    return [r["loss"] for r in rows if "loss" in r]


def test_seed_null_draws_one_seed_that_the_run_records_repeats_and_resumes_with(tmp_path, sp_tokenizer_dir, caplog):
    """torchtune's ``seed: null`` (every config torchtune 0.6.1 ships) was refused. It draws one seed now, printed
    once and recorded wherever the run keeps its config; the references: a run given that integer (the same losses),
    and the same run uninterrupted (a ``seed: null`` resume continues with the recorded seed, bit-exact; another
    integer is refused as any changed seed is). Resumed with ``overwrite_output_dir=True`` as well: resume wins, said
    in one line."""
    import torch

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    run, ref = tmp_path / "run", tmp_path / "ref"
    over = {"seed": None, "max_steps": 2, "save_every_n_steps": 1}
    with caplog.at_level("INFO"):
        first = _train(_tiny_cfg(run, sp_tokenizer_dir, stop_after_step=1, **over))
    seed = first.seed
    assert isinstance(seed, int) and first.config.seed == first.config.order_seed == seed
    said = [r.getMessage() for r in caplog.records if "seed: null" in r.getMessage()]
    assert said == [f"seed: null drew seed={seed} (give seed={seed} to repeat this run)"]
    assert OmegaConf.load(run / "torchtune_config.yaml").seed == seed
    assert torch.load(run / "recipe_state" / "step_1.pt", weights_only=False)["config"]["seed"] == seed
    assert json.loads((run / "metrics.jsonl").read_text().splitlines()[0])["seed"] == seed
    before = sorted(str(p.relative_to(run)) for p in run.rglob("*"))
    with pytest.raises(ValueError, match=rf"seed: {seed} -> {seed + 1}"):  # refused before its setup
        LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, resume=True, **{**over, "seed": seed + 1})).setup()
    assert sorted(str(p.relative_to(run)) for p in run.rglob("*")) == before
    caplog.clear()
    with caplog.at_level("INFO"):
        resumed = _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True, overwrite_output_dir=True, **over))
    assert resumed.seed == seed  # resumed: a fresh run (what an overwrite would start) draws another seed
    assert torch.load(run / "recipe_state" / "step_2.pt", weights_only=False)["config"]["seed"] == seed
    said = [r.getMessage() for r in caplog.records if "seed: null" in r.getMessage() or "overwrite" in r.getMessage()]
    assert said == ["resume=True and overwrite_output_dir=True: the run resumes, and overwrite_output_dir deletes "
                    "nothing", f"seed: null: resume=True continues with the run's recorded seed={seed}"]
    _train(_tiny_cfg(ref, sp_tokenizer_dir, **{**over, "seed": seed}))
    assert len(_losses(ref)) == 2 and _losses(run) == _losses(ref)


def _optimizer_and_schedule(max_steps: int, lr: float = 1e-3, warmup: int = 2, steps: int = 0, **kw):
    import torch
    from torchtune.training.lr_schedulers import get_cosine_schedule_with_warmup

    opt = torch.optim.AdamW([torch.nn.Parameter(torch.ones(3))], lr=lr, **kw)
    sched = get_cosine_schedule_with_warmup(opt, num_warmup_steps=warmup, num_training_steps=max_steps)
    for _ in range(steps):
        opt.step()
        sched.step()
    return opt, sched


@pytest.mark.parametrize("saved, new, changes", [
    # a finished 4-step cosine run extended to 6: step 5 trained at lr 0 (the old schedule's end)
    (dict(max_steps=4, steps=4), dict(max_steps=6), [("max_steps", 4, 6)]),
    # the lr lowered inside the warmup: the first resumed step took the full new lr, 4x the warmup's
    (dict(max_steps=6, warmup=4, steps=1), dict(max_steps=6, warmup=4, lr=2.5e-4),
     [("optimizer.lr", 1e-3, 2.5e-4)]),
])
def test_a_resumed_step_trains_at_the_new_schedules_lr(saved, new, changes):
    """The reference: a fresh optimizer and schedule of the new config, stepped as far as the saved run went."""
    from torchtune_longshort.training.resume import apply_resume_changes, restore_optimizer

    old_opt, old_sched = _optimizer_and_schedule(**saved)
    state = {"optimizer": old_opt.state_dict(), "lr_scheduler": old_sched.state_dict()}
    opt, sched = _optimizer_and_schedule(**new)
    restore_optimizer(state, None, opt, sched, distributed=False, device="cpu")
    apply_resume_changes(changes, opt, sched, log=lambda m: None)
    ref_opt, ref_sched = _optimizer_and_schedule(**new, steps=saved["steps"])
    assert opt.param_groups[0]["lr"] == pytest.approx(ref_opt.param_groups[0]["lr"], rel=1e-12)
    assert opt.param_groups[0]["lr"] != old_opt.param_groups[0]["lr"]  # the state's lr was the stale one
    assert sched.get_last_lr() == pytest.approx(ref_sched.get_last_lr())


def test_an_optimizer_argument_left_out_on_resume_takes_the_default_and_its_class_cannot_change():
    """``~optimizer.weight_decay`` wrote the marker string into the param groups (a TypeError inside torch at the
    first step); AdamW -> SGD was "applied" and failed at the first step, AdamW -> Adam silently stayed AdamW."""
    from torchtune_longshort.training.resume import ABSENT, apply_resume_changes

    opt, sched = _optimizer_and_schedule(max_steps=4, weight_decay=0.0)
    apply_resume_changes([("optimizer.weight_decay", 0.0, ABSENT)], opt, sched, log=lambda m: None)
    assert opt.param_groups[0]["weight_decay"] == 0.01  # AdamW's default
    saved = {"optimizer": {"_component_": "torch.optim.AdamW", "lr": 1e-3}}
    new = {"optimizer": {"_component_": "torch.optim.SGD", "lr": 1e-3}}
    assert RESUME_POLICY["optimizer._component_"] == "exact"
    with pytest.raises(ValueError, match=r"optimizer._component_: 'torch.optim.AdamW' -> 'torch.optim.SGD'"):
        compare_resume_config(saved, new)


def test_a_recipe_state_saved_on_a_gpu_is_read_onto_the_cpu(tmp_path):
    """A one-GPU run saves its optimizer states as CUDA tensors (torch.save tags each storage ``cuda:0``). Read back
    without ``map_location`` they failed on a CPU machine ("Attempting to deserialize object on a CUDA device") and,
    under torchrun, every rank put the whole state on the saving run's GPU; read onto the CPU, the optimizer's
    ``load_state_dict`` moves each to its parameter's device."""
    from unittest import mock

    import torch
    import torch.serialization

    from torchtune_longshort.training.checkpointing import recipe_state_path
    from torchtune_longshort.training.resume import read_resume_state

    step = tmp_path / "step_1"
    step.mkdir()
    path = recipe_state_path(step)
    path.parent.mkdir()
    with mock.patch.object(torch.serialization, "location_tag", lambda storage: "cuda:0"):  # as a CUDA run writes
        torch.save({"step": 1, "optimizer": {"state": {0: {"exp_avg": torch.ones(3)}}, "param_groups": []}}, path)
    state, changes = read_resume_state(step, {})
    assert state["optimizer"]["state"][0]["exp_avg"].device.type == "cpu" and changes == []


def test_a_gpu_runs_cuda_generator_is_saved_and_put_back(monkeypatch):
    """On a GPU, dropout and LoRA dropout draw from the CUDA generator, not the CPU's: the recipe state saved only
    ``torch.get_rng_state()``, so a resumed GPU run with dropout drew other masks than the run it continues. Now
    the current CUDA device's state is saved beside it (torch.cuda's calls stubbed: this CPU has no CUDA) and put
    back on resume and when a bad record rolls a step back; a state saved without it leaves CUDA's as it is."""
    import torch

    from torchtune_longshort.devices import rng_states, set_rng_states
    from torchtune_longshort.training.recipe_checkpoints import training_state

    cuda = {"state": torch.tensor([7, 7], dtype=torch.uint8)}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "is_initialized", lambda: True)
    monkeypatch.setattr(torch.cuda, "get_rng_state", lambda *a: cuda["state"].clone())
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda s, *a: cuda.update(state=s.clone()))

    class Batcher:
        def state_dict(self):
            return {}

    saved = training_state(3, {}, None, Batcher(), {}, {})
    assert saved["cuda_rng"].tolist() == [7, 7] and torch.equal(saved["torch_rng"], torch.get_rng_state())
    torch.rand(5)
    cuda["state"] = torch.tensor([9, 9], dtype=torch.uint8)  # the GPU drew after the save
    set_rng_states(saved)
    assert cuda["state"].tolist() == [7, 7] and torch.equal(torch.get_rng_state(), saved["torch_rng"])
    set_rng_states({"torch_rng": saved["torch_rng"]})  # a state saved before cuda_rng existed, or on a CPU
    assert cuda["state"].tolist() == [7, 7] and set(rng_states()) == {"torch_rng", "cuda_rng"}


def test_a_resume_of_a_state_saved_with_the_earlier_position_draw_says_its_positions_change():
    """Versions before 2026-12-05 drew a micro-batch's PoSE / random_pos ids every window A, then every B (the
    reference below); this one draws sample by sample. The same generator state then gives 2 samples other ids, so
    a run they saved resumed with other losses than it would have had (2e-4 at the next step), without a word. A
    state saved now carries the draw's mark; one without it, with 2+ samples a micro-batch, gets one line; one
    sample draws alike both ways, and says nothing."""
    import torch

    from torchtune_longshort.rope import PoSEPositions
    from torchtune_longshort.training.data_setup import earlier_position_draw, window_positions
    from torchtune_longshort.training.recipe_checkpoints import training_state

    class Batcher:
        def state_dict(self):
            return {}

    sampler = PoSEPositions(target_len=512)

    def earlier(rows):  # the earlier versions' draw
        return sampler.sample(2 * rows, 64, generator=torch.Generator().manual_seed(3))

    for rows, alike in ((1, True), (2, False)):
        now = window_positions(sampler, torch.Generator().manual_seed(3), rows, 64, 0, 1)
        assert torch.equal(now, earlier(rows)) is alike, rows
    gen = torch.Generator().manual_seed(3)
    saved = training_state(4, {}, None, Batcher(), {"position_generator": gen}, {})
    assert earlier_position_draw(saved, sampler, 2) is None  # saved by this version
    old = {k: v for k, v in saved.items() if k != "position_draw"}
    said = earlier_position_draw(old, sampler, 2)
    assert said is not None and said.startswith("resume: step 4 was saved by an earlier torchtune_longshort, which "
                                                "drew a micro-batch's position ids (position_sampler) every window A, "
                                                "then every B"), said
    assert "from step 5 on the samples get other positions" in said, said
    assert earlier_position_draw(old, sampler, 1) is None  # one sample: drawn alike
    assert earlier_position_draw(old, None, 2) is None  # no sampler
    assert earlier_position_draw({**old, "position_generator": None}, sampler, 2) is None  # saved without one


def test_an_interrupted_train_gives_its_folder_back_so_the_same_process_resumes(tmp_path, sp_tokenizer_dir,
                                                                                monkeypatch):
    """A notebook: Ctrl-C inside ``train()`` kept the output folder's lock, and every later run in that process was
    refused as "in use by another run" naming its own PID (waiting never helps). ``train()`` now gives it back; the
    reference: the same run uninterrupted (the resumed losses equal its). A lock this process still holds says so."""
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe
    from torchtune_longshort.training.output_dir import OutputDirLock

    run, ref = tmp_path / "run", tmp_path / "ref"
    over = {"max_steps": 3, "save_every_n_steps": 1}
    first = LongShortFinetuneRecipe(_tiny_cfg(run, sp_tokenizer_dir, **over))
    first.setup()
    real_step, steps = first._train_step, []

    def step():
        if len(steps) == 2:
            raise KeyboardInterrupt
        steps.append(1)
        return real_step()

    monkeypatch.setattr(first, "_train_step", step)
    with pytest.raises(KeyboardInterrupt):
        first.train()
    assert not (run / ".lock").exists()
    _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True, **over))
    _train(_tiny_cfg(ref, sp_tokenizer_dir, **over))
    assert len(_losses(ref)) == 3 and _losses(run) == _losses(ref)

    held = OutputDirLock(tmp_path / "held").acquire()
    with pytest.raises(RuntimeError, match=r"is held by this process .*call its cleanup\(\)"):
        OutputDirLock(tmp_path / "held").acquire()
    held.release()


def test_a_resume_of_a_finished_run_builds_and_writes_nothing(tmp_path, sp_tokenizer_dir, tiny_finished_run, caplog,
                                                               capsys):
    """A job scheduler requeues a finished run with resume=True: the recipe built the model, the data and the
    optimizer, started the metric logger (a new, empty log file) and drew a progress bar, to train nothing. Now the
    setup stops at the resume point: nothing is built or written, train() says why, cleanup() names the checkpoint;
    a higher max_steps trains on from there."""
    run = tmp_path / "run"
    shutil.copytree(tiny_finished_run, run, symlinks=True)  # _tiny_cfg(run, sp_tokenizer_dir), trained

    before = aged(run)  # files and folders, their mtimes too (the lock file made and removed moved the folder's)
    with caplog.at_level("INFO"):
        resumed = _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True))
    said = [r.getMessage() for r in caplog.records if r.getMessage().startswith("Nothing to train")]
    assert said == [f"Nothing to train: resumed at step 1 ({run / 'step_1'}), and this run ends at step 1: "
                    "max_steps=1 (raise it to train on)"], caplog.text
    assert resumed.finished and getattr(resumed, "_model", None) is None
    assert stat_tree(run) == before  # no log file, no metrics line, no checkpoint touched, no mtime moved
    assert f"[longshort] checkpoint: {run / 'step_1'}" in capsys.readouterr().out
    more = _train(_tiny_cfg(run, sp_tokenizer_dir, resume=True, max_steps=2))
    assert not more.finished and more.global_step == 2 and len(_losses(run)) == 2



def test_a_run_from_scratch_resumes_with_its_step_0_deleted(tmp_path, tiny_llama2_dir):
    """step_0 (the random start of a run from scratch, no resume point) deleted to save disk: resume=True was refused
    as "checkpoint_dir='<run>/step_0' is not a directory", a key the config never set. The resume now reads the
    resumed step alone: its weights, and its config.json as the base of the steps it writes (the reference: that
    file as json reads it; with step_0 there, step_0's, as before). Walked: a tiny run resumed from step_8 writes
    step_10 byte-equal to the same resume beside its step_0."""
    from types import SimpleNamespace

    from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
    from torchtune_longshort.training.checkpointing import StepCheckpoints
    from torchtune_longshort.training.model_setup import LoRAInfo
    from torchtune_longshort.training.recipe_checkpoints import start_state_dict

    run = tmp_path / "run"
    shutil.copytree(tiny_llama2_dir, run / "step_2")
    config = SimpleNamespace(checkpointer=SimpleNamespace(checkpoint_dir=None))
    ask = lambda: start_state_dict(config, StepCheckpoints(run), run / "step_2", LoRAInfo(), 0, True, lambda: None)
    state, start, read = ask()
    assert read == start == run / "step_2" and sorted(p.name for p in run.iterdir()) == ["step_2"]
    assert CheckpointFolder.open(read).config == json.loads((run / "step_2" / "config.json").read_text())
    assert state.keys() == CheckpointFolder.open(run / "step_2").tune_state_dict().keys()
    shutil.copytree(tiny_llama2_dir, run / "step_0")  # there: the base is step_0's, as before
    assert ask()[1:] == (run / "step_0", run / "step_0")
    shutil.rmtree(run / "step_0")  # a LoRA run's base is step_0: refused in one line naming it and the fix
    with pytest.raises(ValueError, match=r"^resume=True: .*step_0 \(this run's random start, its LoRA adapters' base\) "
                                         r"is missing: put it back, or train again with overwrite_output_dir=True$"):
        start_state_dict(config, StepCheckpoints(run), run / "step_2", LoRAInfo(rank=2), 0, True, lambda: None)
    # a full fine-tune whose steps are RoPE-scaled (linear x2 in step_2's config.json, as transformers reads it): the
    # resumed step's config.json is the scaled one, not the base its steps are written with: refused likewise
    from transformers import AutoConfig

    hf = json.loads((run / "step_2" / "config.json").read_text())
    (run / "step_2" / "config.json").write_text(json.dumps({**hf, "rope_scaling": {"rope_type": "linear",
                                                                                     "factor": 2.0}}))
    assert AutoConfig.from_pretrained(run / "step_2").rope_scaling["factor"] == 2.0
    with pytest.raises(ValueError, match=r"^resume=True: .*step_0 \(this run's random start, the base its RoPE-scaled "
                                         r"steps are written with\) is missing: put it back, or train again with "
                                         r"overwrite_output_dir=True$"):
        ask()
