"""The positions of a config.json that names no ``max_position_embeddings`` have one owner (``models.hf_rope.
native_positions``): transformers' default for the family's ``model_type`` (what ``AutoConfig`` gives the folder:
LlamaConfig 2048, Qwen2Config 32768), else ``models.hf_rope.DEFAULT_POSITIONS``. The usable length, the RoPE spec read
from a ``rope_scaling`` entry, the decoder built from a folder and the past-usable message (``models.checkpoint_open``)
all follow it.

References: the source tree read with ``ast`` (no module spells a default for the key), each reader run with the
fallback changed to another value, and ``AutoConfig.from_pretrained`` on the same folder."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

import pytest
from transformers import AutoConfig

from torchtune_longshort.eval.model import args as eval_args
from torchtune_longshort.models import hf_rope
from torchtune_longshort.models.checkpoint_open import length_verdict
from torchtune_longshort.models.hf_model import build_decoder

PACKAGE = Path(hf_rope.__file__).resolve().parents[1]


def _defaults_spelt_out():
    """``file:line`` of every ``<x>.get("max_position_embeddings", <default>)`` in the package."""
    hits = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and len(node.args) == 2 and isinstance(node.args[0], ast.Constant)
                    and node.args[0].value == "max_position_embeddings"):
                hits.append(f"{path.relative_to(PACKAGE)}:{node.lineno}")
    return hits


def test_no_module_spells_a_default():
    # native_positions reads the key or asks the family table (transformers' default): no .get(key, default) anywhere
    assert _defaults_spelt_out() == []


CONFIG = {"hidden_size": 64, "num_attention_heads": 4}  # no max_position_embeddings


def test_the_readers_follow_the_owner(monkeypatch, tmp_path, tiny_llama2_dir):
    assert hf_rope.DEFAULT_POSITIONS == 4096  # a config naming no family's model_type: as before
    monkeypatch.setattr(hf_rope, "DEFAULT_POSITIONS", 96)
    assert hf_rope.native_positions(CONFIG) == 96
    assert hf_rope.usable_length_of(CONFIG, None) == 96
    assert hf_rope.usable_length_of(CONFIG, {"method": "linear", "factor": 2.0}) == 192
    spec = hf_rope.rope_spec_from_hf_config({**CONFIG, "rope_scaling": {"rope_type": "yarn", "factor": 2.0}})
    assert spec["original_max_seq_len"] == 96
    verdict = length_verdict("ckpt", CONFIG, None, 96, 200, True, eval_args.NAMES)
    assert "max_length=200 is past the 96 positions" in verdict.message
    assert "config.json max_position_embeddings=96 (not set: the default)" in verdict.message
    folder = tmp_path / "ckpt"
    shutil.copytree(tiny_llama2_dir, folder)
    config = json.loads((folder / "config.json").read_text())
    del config["max_position_embeddings"]
    (folder / "config.json").write_text(json.dumps(config))
    # a llama folder without the key: transformers' LlamaConfig default (2048), not the fallback (this test pinned
    # 96 here, the fallback, before the family's default was asked)
    assert build_decoder(folder).max_seq_len == AutoConfig.from_pretrained(folder).max_position_embeddings


@pytest.mark.parametrize("model_type", ["llama", "qwen2"])
def test_a_folder_without_the_key_covers_what_transformers_gives_it(tmp_path, model_type):
    config = {**CONFIG, "model_type": model_type, "num_key_value_heads": 4, "vocab_size": 64}
    (tmp_path / "config.json").write_text(json.dumps(config))
    expected = AutoConfig.from_pretrained(tmp_path).max_position_embeddings
    assert hf_rope.native_positions(config) == expected
    assert hf_rope.usable_length_of(config, None) == expected
    assert hf_rope.usable_length_of(config, {"method": "linear", "factor": 2.0}) == 2 * expected
