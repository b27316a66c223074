"""What a resumed run may change is declared by each field of the typed recipe config (``setting(resume=...)``), and
``training/resume.py`` derives its keys from those declarations: a new field cannot be forgotten.

References: a real run of the tiny recipe resumed in-process with ``window_bos`` flipped (refused in one line that
names it, before any step), and the hand-kept list of must-match keys that the declarations replaced."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from run_folders import aged, stat_tree

from torchtune_longshort.config.fields import RESUME_POLICIES, resume_policies
from torchtune_longshort.models.families import converted_alike
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


@pytest.mark.parametrize("spelled", [[1, 32], ["1", "32"], [1, "L / 2"], [1, "0.5L"], [1, "2*L/4"]])
def test_an_e_range_written_another_way_is_the_same_range(spelled):
    """``e_range: [1, 32]`` on resuming a run saved with ``[1, L/2]`` at seq_len 64 (L/2 = 32, the same shifts) was
    refused as ``e_range: [1, 'L/2'] -> [1, 32]``; another range is still refused, named as written."""
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "e_range": [1, "L/2"]}
    assert compare_resume_config(saved, {**saved, "e_range": spelled}) == []
    assert compare_resume_config({**saved, "e_range": spelled}, saved) == []
    with pytest.raises(ValueError, match=r"e_range: \[1, 'L/2'\] -> \[1, 16\]"):
        compare_resume_config(saved, {**saved, "e_range": [1, 16]})
    with pytest.raises(ValueError, match=r"seq_len: 64 -> 128"):  # the same words at another L are other shifts
        compare_resume_config(saved, {**saved, "seq_len": 128})


@pytest.mark.parametrize("spelled", ["llama2", "Llama2"])
def test_a_model_type_in_another_case_is_the_same_model_type(spelled):
    """``checkpointer.model_type=llama2`` on resuming a run saved with ``LLAMA2`` (torchtune's one ModelType, whose
    value is ``llama2``; the config check takes either) was refused as ``'LLAMA2' -> 'llama2'``."""
    from torchtune.training.checkpointing._utils import ModelType

    assert ModelType(spelled.lower()) is ModelType["LLAMA2"]
    assert ModelType("gemma2") is ModelType["GEMMA2"] and converted_alike("gemma2", "GEMMA2")  # in no family
    node = {"_component_": "torchtune.training.FullModelHFCheckpointer", "checkpoint_dir": None, "model_type": "LLAMA2"}
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "checkpointer": node}
    assert compare_resume_config(saved, {**saved, "checkpointer": {**node, "model_type": spelled}}) == []
    with pytest.raises(ValueError, match=r"checkpointer\.model_type: 'LLAMA2' -> 'qwen2'"):  # as written
        compare_resume_config(saved, {**saved, "checkpointer": {**node, "model_type": "qwen2"}})


@pytest.mark.parametrize("saved_type,new_type", [("LLAMA3_2", "LLAMA3"), ("LLAMA3", "llama2"), ("PHI4", "PHI3_MINI")])
def test_a_model_type_torchtune_converts_alike_resumes(family_dirs, tmp_path, saved_type, new_type):
    """A run of a SmolLM2-shaped (llama_tied) model saved with ``LLAMA3_2`` and resumed with ``LLAMA3`` (the config
    check takes either; this recipe converts by the family) was refused as ``'LLAMA3_2' -> 'LLAMA3'``. The
    reference: torchtune's own FullModelHFCheckpointer reads the family's folder into the same weights under both."""
    from torchtune.training import FullModelHFCheckpointer

    folder = family_dirs["phi4" if saved_type == "PHI4" else "smollm2"]
    weights = sorted(p.name for p in folder.glob("*.safetensors"))
    read = [FullModelHFCheckpointer(str(folder), weights, t.upper(), str(tmp_path / t)).load_checkpoint()["model"]
            for t in (saved_type, new_type)]
    assert read[0].keys() == read[1].keys() and all(torch.equal(read[0][k], read[1][k]) for k in read[0])
    node = {"_component_": "torchtune.training.FullModelHFCheckpointer", "checkpoint_dir": None,
            "model_type": saved_type}
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "checkpointer": node}
    assert compare_resume_config(saved, {**saved, "checkpointer": {**node, "model_type": new_type}}) == []


@pytest.mark.parametrize("spelled", ["llama3_2", "LLAMA3_2", "qwen2", " llama3_2"])
def test_resume_takes_a_model_type_exactly_where_the_config_check_does(spelled):
    """Resuming a ``LLAMA3_2`` run with ``checkpointer.model_type`` spelled another way is accepted where the config
    check (``check_torchtune_model_type``, for the family that reads it) takes the spelling, and both where torchtune's
    own ``ModelType`` has it as the member ``LLAMA3_2`` (by its name or its value, case-blind)."""
    from torchtune.training.checkpointing._utils import ModelType

    from torchtune_longshort.models.families import MODEL_FAMILIES, UnsupportedModelError, check_torchtune_model_type

    member = ModelType.__members__.get(spelled.upper()) or ModelType._value2member_map_.get(spelled.lower())
    expected = member is ModelType.LLAMA3_2
    try:
        check_torchtune_model_type(MODEL_FAMILIES["llama_tied"], spelled, "checkpointer.model_type")
        checked = True
    except UnsupportedModelError:
        checked = False
    node = {"_component_": "torchtune.training.FullModelHFCheckpointer", "checkpoint_dir": None,
            "model_type": "LLAMA3_2"}
    saved = {"output_dir": "o", "seq_len": 64, "max_steps": 2, "checkpointer": node}
    try:
        resumed = compare_resume_config(saved, {**saved, "checkpointer": {**node, "model_type": spelled}}) == []
    except ValueError as e:
        assert f"checkpointer.model_type: 'LLAMA3_2' -> {spelled!r}" in str(e)
        resumed = False
    assert resumed == checked == expected
