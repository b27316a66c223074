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
import re

import pytest
from recipe_config import make_cfg

from torchtune_longshort.models import checkpoint_tokenizer
from torchtune_longshort.training.recipe_config.validate import main as validate_main

LOGGING = "torchtune.training.metric_logging."
TEXT_COMPLETION = "torchtune.datasets.text_completion_dataset"

CASES = [
    # torchtune's tokenizers cut each sample to max_seq_len: a torchtune dataset's documents were cut, silently
    ({"tokenizer.max_seq_len": 8192}, r"tokenizer.max_seq_len=8192 is not accepted: .*cut each document .*"
                                      r"set tokenizer.max_seq_len: null"),
    # torchtune's `seed: null` (its llama3_2 configs) is a random seed; the recipe trained with seed 0, silently
    ({"seed": None}, r"seed=None is not accepted: torchtune reads seed: null as a new random seed"),
    ({"loss": {"_component_": "torchtune.modules.loss.CEWithChunkedOutputLoss"}},
     r"expected torchtune_longshort.loss.LongShortLoss or a subclass \(torchtune's cross-entropy: .*loss.alpha=0"),
    ({"custom_sharded_layers": ["tok_embeddings", "output"]}, r"'custom_sharded_layers' \(torchtune's key; no "
                                                               r"counterpart here: .*FSDP2 units"),
    ({"fsdp_cpu_offload": True}, r"'fsdp_cpu_offload' \(torchtune's key; no counterpart here: FSDP2 CPU offload"),
    ({"low_cpu_ram": False}, r"'low_cpu_ram' \(torchtune's key; no counterpart here"),
    ({"collate_fn": "torchtune.data.padded_collate_sft"}, r"'collate_fn' \(torchtune's key; no counterpart here"),
    ({"tensor_parallel_dim": 2}, r"'tensor_parallel_dim' \(torchtune's key; .*tensor parallelism is not supported"),
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
