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
