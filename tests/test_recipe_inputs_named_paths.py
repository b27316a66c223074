"""Which strings of a component node recipe_config/inputs.py takes for inputs (mutants42): every existing path in
nested nodes and lists, named by its field path, but not an empty string (pathlib reads '' as '.', the current
folder) and not the arguments where a run writes. Reference: os.path.exists on the same strings."""

from __future__ import annotations

import os

from torchtune_longshort.training.recipe_config.inputs import _named_paths


def test_existing_paths_are_named_by_their_field_and_writes_and_blanks_are_not(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "merges.txt").write_text("x")
    (tmp_path / "out").mkdir()
    node = {"_component_": "m.f", "path": "", "merges_file": "merges.txt", "output_dir": "out", "log_dir": "out",
            "files": ["nope.txt", {"inner": "out"}], "blank": "  "}
    assert os.path.exists("") is False and os.path.exists("out")  # the reference: '' names no file
    got = [(field, str(p)) for field, p in _named_paths(node, "tokenizer")]
    assert got == [("tokenizer.merges_file", "merges.txt"), ("tokenizer.files[1].inner", "out")]
