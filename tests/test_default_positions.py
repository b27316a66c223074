"""The positions of a config.json that names no ``max_position_embeddings`` have one owner
(``models.hf_rope.DEFAULT_POSITIONS``, read through ``native_positions``): the usable length, the RoPE spec read from
a ``rope_scaling`` entry, the decoder built from a folder and the past-usable message (``models.checkpoint_open``) all
follow it.

References: the source tree read with ``ast`` (no other module spells a default for the key), and each reader run with
the owner changed to another value."""

from __future__ import annotations

import ast
import json
import shutil
from pathlib import Path

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


def test_one_module_spells_the_default():
    assert _defaults_spelt_out() == [f"models/hf_rope.py:{_native_positions_line()}"]


def _native_positions_line():
    tree = ast.parse(Path(hf_rope.__file__).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "native_positions")
    return next(n.lineno for n in ast.walk(fn) if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "get")


CONFIG = {"hidden_size": 64, "num_attention_heads": 4}  # no max_position_embeddings


def test_the_readers_follow_the_owner(monkeypatch, tmp_path, tiny_llama2_dir):
    assert hf_rope.DEFAULT_POSITIONS == 4096  # Llama-2's pre-trained length, as before
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
    assert build_decoder(folder).max_seq_len == 96
