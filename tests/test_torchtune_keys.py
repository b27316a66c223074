"""A torchtune 0.6.1 config's keys, ported to the long-short recipe: each one the recipe does not read with
torchtune's meaning is answered in one line naming it, before any output folder exists (docs/recipe.md, "Coming
from a torchtune config").

Reference for the values: torchtune's shipped configs (``recipes/configs/llama3_2/1B_lora_single_device.yaml`` and
kin) and what torchtune does with them: ``tokenizer.max_seq_len`` cuts every sample a torchtune dataset builds
(measured below with torchtune's ``text_completion_dataset``), ``seed: null`` draws a random seed, a metric logger
imports its package when built, ``lr: 3e-4`` loads as a float through ``OmegaConf.load`` (``tune run``).
"""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

import pytest
import torch
from recipe_config import make_cfg

from torchtune_longshort.models import checkpoint_tokenizer
from torchtune_longshort.training.recipe_config.validate import check_config_argument
from torchtune_longshort.training.recipe_config.validate import main as validate_main

ROOT = Path(__file__).resolve().parent.parent
LOGGING = "torchtune.training.metric_logging."
TEXT_COMPLETION = "torchtune.datasets.text_completion_dataset"

CASES = [
    # torchtune's tokenizers cut each sample to max_seq_len: a torchtune dataset's documents were cut, silently
    ({"tokenizer.max_seq_len": 8192}, r"tokenizer.max_seq_len=8192 is not accepted: .*cut each document .*"
                                      r"set tokenizer.max_seq_len: null"),
    ({"loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"}},
     r"expected torchtune_longshort.loss.LongShortLoss or a subclass \(torchtune's cross-entropy: .*loss.alpha=0"),
    ({"custom_sharded_layers": ["tok_embeddings", "output"]}, r"'custom_sharded_layers' \(torchtune's key; no "
                                                               r"counterpart here: .*FSDP2 units"),
    ({"fsdp_cpu_offload": True}, r"'fsdp_cpu_offload' \(torchtune's key; no counterpart here: FSDP2 CPU offload"),
    ({"low_cpu_ram": True}, r"'low_cpu_ram' \(torchtune's key; no counterpart here: .*low_cpu_ram: False is accepted"),
    # torchtune's keys at values this recipe cannot honour (at the values that ask for what it does: accepted, below)
    ({"resume_from_checkpoint": True}, r"'resume_from_checkpoint' \(torchtune's name: did you mean 'resume'\?"),
    ({"save_adapter_weights_only": True}, r"'save_adapter_weights_only' \(torchtune's key; no counterpart here: "
                                          r".*save_adapter_weights_only: False is accepted"),
    ({"optimizer_in_bwd": True}, r"'optimizer_in_bwd' \(torchtune's key; .*optimizer_in_bwd: False is accepted"),
    # torchtune's shuffle: True is honoured; with the stdlib's own shuffle_seed there would be two orders
    ({"shuffle": True, "dataset.shuffle_seed": 0}, r"^shuffle=True with dataset.shuffle_seed=0: two shuffles of the "
                                                   r"same documents; use one: .*with shuffle=False$"),
    ({"log_peak_memory_stats": 0}, r"'log_peak_memory_stats' \(torchtune's key; .*logged either way"),
    ({"max_steps_per_epoch": 10}, r"'max_steps_per_epoch' \(torchtune's name: did you mean 'max_steps'\? .*"
                                  r"max_steps_per_epoch: null is accepted"),
    ({"fsdp": {"cpu_offload": True}}, r"'fsdp' \(torchtune's key; .*fsdp: \{cpu_offload: False\} is accepted"),
    ({"tensor_parallel_dim": True}, r"'tensor_parallel_dim' \(torchtune's key; .*tensor_parallel_dim: 1 is accepted"),
    ({"tensor_parallel_dim": 2, "tensor_parallel_plan": {"_component_": "torchtune.models.llama3.base_llama_tp_plan"}},
     r"'tensor_parallel_dim' .*, 'tensor_parallel_plan' \(torchtune's key; .*tensor parallelism is not supported"),
    ({"collate_fn": "torchtune.data.padded_collate_sft"}, r"'collate_fn' \(torchtune's key; no counterpart here"),
    # full_finetune_distributed's keys were "unknown" here, hinted at unrelated keys ('model', ...)
    ({"enable_async_checkpointing": True}, r"^config key\(s\) this recipe does not take .*'enable_async_checkpointing'"
                                           r" \(torchtune's key; .*enable_async_checkpointing: False is accepted"),
    # torchtune's checkpointer writes .bin files with it; the recipe wrote safetensors, silently
    ({"checkpointer.safe_serialization": False}, r"^checkpointer.safe_serialization=False is not accepted: every "
                                                 r"step_<k> is written as safetensors .*safe_serialization: True or "),
    # torchtune's list of datasets (their ConcatDataset): "dataset=[{...}, {...}] ... expected a mapping"
    ({"dataset": [{"_component_": TEXT_COMPLETION, "source": "text", "data_files": "a.txt"},
                  {"_component_": TEXT_COMPLETION, "source": "text", "data_files": "b.txt"}]},
     r"^dataset is a list of 2 nodes, torchtune's ConcatDataset of them, .*data_files: \[a.json, b.json\]"),
    # torchtune's validation keys (after 0.6.1): hinted at log_every_n_steps and dataset
    ({"run_val_every_n_steps": 10}, r"'run_val_every_n_steps' \(torchtune's name: did you mean "
                                    r"'validation.every_n_steps'\?"),
    ({"dataset_val": {"_component_": TEXT_COMPLETION}}, r"'dataset_val' \(torchtune's name: did you mean "
                                                         r"'validation.dataset'\?"),
    ({"ac_mode": "selective", "ac_option": 2}, r"'ac_mode' \(torchtune's name: did you mean "
                                               r"'enable_activation_checkpointing'\? selective .*ac_mode: null is"),
    ({"tensor_parallel_dim": 2}, r"^config key\(s\) this recipe does not take at the top level: 'tensor_parallel_dim' "
                                 r"\(torchtune's key; .*tensor parallelism is not supported"),
    # a typo beside torchtune's key: each named for what it is
    ({"tensor_parallel_dim": 2, "max_step": 3}, r"^unknown config key\(s\) at the top level: 'max_step' \(did you "
                                                r"mean 'max_steps'\?\); config key\(s\) this recipe does not take at "
                                                r"the top level: 'tensor_parallel_dim' \(torchtune's key; "),
    # torchtune's batch_size is per process and micro-batch (llama3_2/1B_lora_single_device: 4 with accumulation 8)
    ({"batch_size": 4, "gradient_accumulation_steps": 8}, r"batch_size=4 is not divisible .*torchtune's is per "
                                                          r"process and micro-batch: its batch_size=4 with these is "
                                                          r"batch_size=32 here"),
]
for name, package in (("WandBLogger", "wandb"), ("CometLogger", "comet_ml"), ("MLFlowLogger", "mlflow")):
    if importlib.util.find_spec(package) is None:  # torchtune's ImportError came as a traceback, after the folder
        CASES.append(({"metric_logger": {"_component_": LOGGING + name}},
                      rf"metric_logger._component_='{LOGGING}{name}' needs the '{package}' package, which is not "
                      rf"installed here: pip install {package.replace('_', '-')}, or log with .*DiskLogger"))


@pytest.mark.parametrize("over,match", CASES, ids=[re.sub(r"\W", "", str(c[0]))[:30] for c in CASES])
def test_torchtune_keys_are_answered_in_one_line(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, over, match):
    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    out = tmp_path / "out"
    with pytest.raises((ValueError, KeyError)) as err:
        LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, out, **over))
    assert re.search(match, str(err.value)), str(err.value)
    assert "\n" not in str(err.value) and not out.exists()


@pytest.mark.parametrize("kind", ["torchtune", "checkpoint_tokenizer"])
def test_tokenizer_max_seq_len_cuts_torchtune_datasets_documents(tmp_path, sp_tokenizer_dir, kind):
    """Why ``tokenizer.max_seq_len`` is refused: torchtune's ``text_completion_dataset`` gives the stream each
    document cut to its first ``max_seq_len`` tokens (a 200-word line: 32 tokens at most, against all of them)."""
    from torchtune.datasets import text_completion_dataset
    from torchtune.models.llama2 import llama2_tokenizer

    data = tmp_path / "d.txt"
    data.write_text(" ".join(f"word{i}" for i in range(200)) + "\n")
    model = str(sp_tokenizer_dir / "tokenizer.model")

    def tokens(max_seq_len):
        tok = (llama2_tokenizer(model, max_seq_len=max_seq_len) if kind == "torchtune"
               else checkpoint_tokenizer(model, max_seq_len=max_seq_len))
        return len(text_completion_dataset(tok, source="text", data_files=str(data), split="train")[0]["tokens"])

    assert tokens(32) <= 32 < 400 < tokens(None)


def test_validate_reads_exponent_floats_as_tune_run_does(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, capsys):
    """``lr: 3e-4`` (torchtune's configs' spelling) is 0.0003 to ``tune run`` (``OmegaConf.load``); longshort-validate
    read it with plain YAML 1.1 as the string '3e-4' and refused a config tune run accepts."""
    from omegaconf import OmegaConf

    cfg = make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out")
    text = OmegaConf.to_yaml(cfg).replace("lr: 0.003", "lr: 3e-4")
    assert "lr: 3e-4" in text
    path = tmp_path / "theirs.yaml"
    path.write_text(text)
    assert validate_main([str(path)]) == 0, capsys.readouterr()
    assert ": OK" in capsys.readouterr().out


# torchtune's values that ask for what this recipe does anyway: accepted, nothing read
AS_HERE = [{"resume_from_checkpoint": False}, {"save_adapter_weights_only": False}, {"optimizer_in_bwd": False},
           {"shuffle": False}, {"log_peak_memory_stats": True}, {"log_peak_memory_stats": False},
           {"max_steps_per_epoch": None}, {"low_cpu_ram": False},
           {"fsdp_cpu_offload": False}, {"fsdp": {"cpu_offload": False}}, {"tensor_parallel_dim": 1},
           {"tensor_parallel_dim": 1, "tensor_parallel_plan": {"_component_": "torchtune.models.llama3.nope"}},
           {"tensor_parallel_plan": {"_component_": "torchtune.models.llama3.base_llama_tp_plan"}},
           {"enable_async_checkpointing": False}, {"ac_mode": None, "ac_option": None},
           {"custom_sharded_layers": None}, {"custom_sharded_layers": []}]


@pytest.mark.parametrize("over", AS_HERE, ids=[re.sub(r"\W", "", str(c))[:40] for c in AS_HERE])
def test_torchtune_values_that_ask_for_what_the_recipe_does_are_accepted(tmp_path, tiny_llama2_dir, sp_tokenizer_dir,
                                                                          over):
    from torchtune_longshort.training.recipe_config import load_recipe_config

    plain = load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out"))
    assert load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", **over)) == plain
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("value", ["inf", float("inf"), "Infinity"], ids=["text", "yaml_dot_inf", "Infinity"])
def test_clip_grad_norm_inf_is_torchtunes_log_only_setting(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, value):
    """torchtune's recipes tell a user to set ``clip_grad_norm='inf'`` to log the gradient norm without clipping
    (their docstrings: the reference); it was refused here ("expected a finite number > 0"). It is null's config:
    no clipping, grad_norm logged."""
    import torchtune

    from torchtune_longshort.training.recipe_config import load_recipe_config

    src = (Path(torchtune.__file__).resolve().parents[1] / "recipes" / "full_finetune_distributed.py").read_text()
    assert "``clip_grad_norm='inf'``" in src
    with_inf = load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", clip_grad_norm=value))
    plain = load_recipe_config(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out", clip_grad_norm=None))
    assert with_inf.clip_grad_norm is None and with_inf == plain
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("mode,expected", [("warn", 1), (2, 2), ("default", 0)], ids=["warn", "2", "default"])
def test_cudnn_deterministic_mode_sets_torchs_debug_mode_as_torchtune_does(tmp_path, tiny_llama2_dir,
                                                                             sp_tokenizer_dir, mode, expected):
    """torchtune's recipes pass ``cudnn_deterministic_mode`` to ``training.set_seed(debug_mode=...)``; here it was
    an unknown key ("did you mean ...?"). The reference: torch's mode after torchtune's own ``set_seed``."""
    from torchtune import training

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    before = torch.get_deterministic_debug_mode()
    try:
        training.set_seed(0, debug_mode=mode)
        theirs = torch.get_deterministic_debug_mode()
        torch.set_deterministic_debug_mode(1 - expected if expected < 2 else 0)
        LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out",
                                         cudnn_deterministic_mode=mode))
        assert torch.get_deterministic_debug_mode() == theirs == expected
    finally:
        torch.set_deterministic_debug_mode(before)
    with pytest.raises(ValueError, match=r"^cudnn_deterministic_mode='strict' is not accepted: expected one of "):
        LongShortFinetuneRecipe(make_cfg(tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out2",
                                         cudnn_deterministic_mode="strict"))
    assert not (tmp_path / "out2").exists()


def _ported(name, ckpt, tok, out):
    """torchtune's installed config ``name`` ported as docs/recipe.md says: model, tokenizer and checkpointer swapped
    onto the tiny checkpoint (the model node's LoRA keys kept), the long-short keys added, nothing else touched."""
    import torchtune
    from omegaconf import OmegaConf

    path = Path(torchtune.__file__).resolve().parents[1] / "recipes" / "configs" / name
    cfg = OmegaConf.to_container(OmegaConf.load(path), resolve=False)
    given = {k: v for k, v in cfg.items() if k not in ("model", "tokenizer", "checkpointer")}
    cfg["model"] = {**cfg["model"], "_component_": "torchtune_longshort.models.hf_decoder", "checkpoint_dir": str(ckpt)}
    cfg["tokenizer"] = {"_component_": "torchtune.models.llama2.llama2_tokenizer",
                        "path": str(tok / "tokenizer.model"), "max_seq_len": cfg["tokenizer"]["max_seq_len"]}
    cfg["checkpointer"].update(checkpoint_dir=str(ckpt), checkpoint_files=None, model_type="LLAMA2")
    cfg.update(output_dir=str(out), seq_len=64, e_range=[1, "L/2"], max_steps=2, device="cpu",
               loss={"_component_": "torchtune_longshort.loss.LongShortLoss", "alpha": 0.1})
    return cfg, given


# torchtune 0.6.1's shipped config -> (its keys at values this recipe accepts; the keys still refused)
PORTS = {
    "llama3_2/1B_lora_single_device.yaml": (
        {"resume_from_checkpoint": False, "save_adapter_weights_only": False, "max_steps_per_epoch": None,
         "log_peak_memory_stats": True}, ["epochs"]),
    "llama3/70B_full.yaml": (
        {"resume_from_checkpoint": False, "max_steps_per_epoch": None, "log_peak_memory_stats": True,
         "optimizer_in_bwd": False, "tensor_parallel_dim": 1}, ["epochs", "custom_sharded_layers",
                                                                "fsdp_cpu_offload"]),
}


@pytest.mark.parametrize("name", sorted(PORTS))
def test_a_ported_torchtune_config_validates_with_fewer_edits(tmp_path, tiny_llama2_dir, sp_tokenizer_dir, capsys,
                                                                name):
    """A torchtune config, read from torchtune's installed file: its keys at values that ask for what this recipe
    does pass (they were each refused); ``shuffle: True`` and ``seed: null`` are read (they were refused); those
    asking for what it cannot do (epochs: 1, fsdp_cpu_offload: True, ...) are refused, all in one line; with those
    edited and batch_size set, OK, with a note that the seed is drawn when the run starts."""
    from omegaconf import OmegaConf

    cfg, given = _ported(name, tiny_llama2_dir, sp_tokenizer_dir, tmp_path / "out")
    harmless, refused = PORTS[name]
    assert {k: given[k] for k in harmless} == harmless  # torchtune's file carries them at these values
    assert given["shuffle"] is True and given["seed"] is None  # and shuffle: True, seed: null, kept as they are
    path = tmp_path / "theirs.yaml"
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    with pytest.raises(SystemExit) as exit_info:
        validate_main([str(path)])
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1, err
    named = re.findall(r"'(\w+)' \(torchtune's", err)
    assert named == refused, err
    for key in refused:
        del cfg[key]
    cfg.update(batch_size=given["batch_size"] * cfg["gradient_accumulation_steps"])
    path.write_text(OmegaConf.to_yaml(OmegaConf.create(cfg)))
    assert validate_main([str(path)]) == 0
    out = capsys.readouterr().out
    assert ": OK" in out and all(f"{k}: {'null' if v is None else v} (" in out for k, v in harmless.items()), out
    assert "note: seed: null draws the run's seed when tune run starts" in out, out
    assert out.count("\n") == 3, out  # the two notes, then OK
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("name", sorted(f"study/{p.name}" for p in (ROOT / "configs" / "study").glob("*.yaml")))
def test_a_study_config_given_to_the_recipe_is_named_as_one(capsys, name):
    """Every shipped study YAML (its ``not_a_torchtune_config`` marker) handed to the recipe's config check is
    answered with the command that runs it, not a list of its keys as unknown recipe keys, nor (cpu_medium, whose
    ``recipe_overrides`` say ``${tokenizer.path}``) "Interpolation key 'tokenizer.path' not found"."""
    with pytest.raises(SystemExit) as caught:
        validate_main([name])
    err = capsys.readouterr().err.strip()
    assert caught.value.code == 2 and len(err.splitlines()) == 1, err
    assert "this is a study config" in err and "python -m torchtune_longshort.study --config <file>" in err, err
    assert "unknown config key" not in err, err
    with pytest.raises(KeyError) as recipe:  # tune run's check of --config, before torchtune's parser reads it
        check_config_argument(["--config", name])
    assert "this is a study config" in str(recipe.value), str(recipe.value)


def test_the_step_metrics_carry_the_names_torchtunes_recipes_log(tmp_path):
    """A plot script written for torchtune's logs reads ``tokens_per_second_per_gpu``, ``loss``, ``lr`` and
    ``grad_norm``: each recipe of torchtune 0.6.1 logs them (their source is the reference). Ours logged
    ``tokens_per_second`` only (all processes'); torchtune's is the all-process count over the process count."""
    from torchtune_longshort.training.metrics import JsonlMetricLogger, RunLog

    folder = Path(importlib.util.find_spec("torchtune").origin).parents[1] / "recipes"
    theirs = set()
    for name in ("full_finetune_single_device", "full_finetune_distributed", "lora_finetune_single_device",
                 "lora_finetune_distributed"):
        src = (folder / f"{name}.py").read_text()
        block = src[src.index("log_dict = {"):src.index("self._metric_logger.log_dict(", src.index("log_dict = {"))]
        theirs |= set(re.findall(r'"(\w+)":', block))
    theirs -= {"peak_memory_active", "peak_memory_alloc", "peak_memory_reserved"}  # CUDA only: peak_memory_gib
    assert {"loss", "lr", "tokens_per_second_per_gpu", "grad_norm"} <= theirs

    logged = []

    class Logger:
        def log_dict(self, payload, step):
            logged.append(payload)

    run = RunLog(Logger(), JsonlMetricLogger(tmp_path / "metrics.jsonl"), enabled=True)
    run.start(total_steps=1, step=0)
    try:
        run.tokens = 4096
        run.log_step(1, {"loss": 2.0, "ce": 2.0, "misalignment": 0.5, "e": 3.0}, 1e-4,
                     {"grad_norm": torch.tensor(0.5)}, torch.device("cpu"), world_size=4)
    finally:
        run.close()
    assert theirs <= set(logged[0]), sorted(theirs - set(logged[0]))
    assert logged[0]["tokens_per_second_per_gpu"] == pytest.approx(logged[0]["tokens_per_second"] / 4)
    row = json.loads((tmp_path / "metrics.jsonl").read_text().splitlines()[-1])
    assert theirs <= set(row)
