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


def test_the_recipes_own_tokenizer_training_names_the_model_key_inside_rope_scaled(tmp_path, monkeypatch):
    # the recipe's setup trains the tokenizer through tokenizer_check.load_tokenizer, whose refusal still said
    # '(and model.vocab_size)' inside rope_scaled (reached where the config check's count said nothing)
    from torchtune_longshort.training import bootstrap
    from torchtune_longshort.training.recipe_setup import RecipeSetup

    cfg = _rope_scaled(tmp_path, 300, 300)
    monkeypatch.setattr(bootstrap, "_pieces_needed", lambda limit: None)  # the check's count unknown: it passes
    setup = RecipeSetup.__new__(RecipeSetup)
    setup.config = load_recipe_config(cfg)
    with pytest.raises(ValueError) as refused:
        setup._setup()  # its first step: the tokenizer, trained here
    line = str(refused.value)
    assert line.startswith("tokenizer.vocab_size=300 is smaller than the "), line
    key = re.search(r"\(and (model[\w.]*\.vocab_size)\)", line).group(1)
    assert OmegaConf.select(cfg, key) == 300, (key, line)  # a key the config has
    assert not (tmp_path / "tok").exists()
