"""The study's pre-flight trains the tokenizer its first recipe run would, found by the recipe config's
``tokenizer._component_``; it resolved that path by its own split on the last dot (``import_module('pre_tok.Holder')``,
which fails), so a function inside a class, which torchtune's ``_component_`` finds (and so the recipe, which trains
it), was taken for a component that trains nothing: no tokenizer trained, its tokens not counted. It now finds it as
the recipe's config check does (torchtune's ``_get_component_from_path``, the reference)."""

from __future__ import annotations

import types

from torchtune.config._utils import _get_component_from_path
from user_modules import forget_user_module, write_user_module

from torchtune_longshort.study.preflight import _trained_tokenizer

SOURCE = """
from pathlib import Path
class Holder:
    @staticmethod
    def train(path, **kwargs):
        Path(path).mkdir(parents=True, exist_ok=True)
        (Path(path) / "tokenizer.model").write_text("trained")
Holder.train.trains_missing_path = True
"""


def test_a_tokenizer_component_inside_a_class_is_trained_first(tmp_path, monkeypatch):
    write_user_module(tmp_path / "mods", {"pre_tok/__init__.py": SOURCE}, monkeypatch)
    forget_user_module("pre_tok")
    path = "pre_tok.Holder.train"
    assert getattr(_get_component_from_path(path), "trains_missing_path", False)  # what the recipe would run
    study = types.SimpleNamespace(recipe_config=lambda key: {"tokenizer": {"_component_": path, "path": "tok"}})
    said = []
    folder = _trained_tokenizer(study, tmp_path / "into", said.append)
    assert folder == tmp_path / "into" / "tokenizer" and (folder / "tokenizer.model").read_text() == "trained"
    assert said == [f"[study] pre-flight: training the study's tokenizer first ({path}), to count tokens with it"]
    forget_user_module("pre_tok")
