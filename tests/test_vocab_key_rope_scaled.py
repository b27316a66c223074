"""The tokenizer-vocabulary refusals named ``model.vocab_size`` even where the model node sits inside
``rope_scaled`` (its key ``model.model.vocab_size``), a key the config does not have; they now name the key the
config gives (the reference: that key read back from the config itself holds the number the refusal gives)."""

import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from torchtune_longshort.training.recipe_config import load_recipe_config

ROOT = Path(__file__).resolve().parents[1]


def _rope_scaled(tmp_path, vocab: int, tokenizer_vocab: int):
    cfg = OmegaConf.load(ROOT / "configs/tiny/longshort_stdlib.yaml")
    inner = cfg.model
    inner.vocab_size = vocab
    cfg.model = {"_component_": "torchtune_longshort.models.rope_scaled", "method": "yarn", "max_seq_len": 1024,
                 "model": inner}
    cfg.tokenizer.path, cfg.tokenizer.vocab_size = str(tmp_path / "tok"), tokenizer_vocab
    cfg.tokenizer.train_files_limit, cfg.output_dir = 3, str(tmp_path / "out")
    return cfg


def _refusal(cfg) -> str:
    with pytest.raises(ValueError) as refused:
        load_recipe_config(cfg)
    return str(refused.value)


def _named_key_holds(cfg, line: str, word: str) -> None:
    key, value = re.search(rf"(model[\w.]*\.vocab_size){word}(\d+)", line).groups()
    assert OmegaConf.select(cfg, key) == int(value), (key, line)  # a key the config has, holding that number


def test_the_vocab_floor_names_the_model_key_inside_rope_scaled(tmp_path):
    cfg = _rope_scaled(tmp_path, 300, 300)
    line = _refusal(cfg)
    assert line.startswith("tokenizer.vocab_size=300 is smaller than the "), line
    assert "(and model.model.vocab_size) to at least" in line, line
    assert OmegaConf.select(cfg, "model.model.vocab_size") == 300 and OmegaConf.select(cfg, "model.vocab_size") is None


def test_the_fit_refusal_names_the_model_key_inside_rope_scaled(tmp_path):
    cfg = _rope_scaled(tmp_path, 400, 512)
    line = _refusal(cfg)
    assert "does not fit the model's embedding table (400 rows: model.model.vocab_size=400)" in line, line
    _named_key_holds(cfg, line, "=")
