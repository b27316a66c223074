"""The README's recipe-config table is the one generated from the dataclasses, and every field has a doc."""

from __future__ import annotations

from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def test_readme_table_is_generated_from_the_dataclasses():
    from torchtune_longshort.training.recipe_config.docs import config_table, readme_table

    assert readme_table((REPO / "README.md").read_text()) == config_table(), (
        "README's recipe-config table is stale: python -m torchtune_longshort.training.recipe_config.docs README.md")


def test_every_field_has_a_doc_and_a_unique_key():
    from torchtune_longshort.training.recipe_config.docs import rows

    keys = [k for k, _, _ in rows()]
    assert len(keys) == len(set(keys))
    assert all(doc.strip() for _, _, doc in rows())
    assert {"seq_len", "e_range", "loss.alpha", "validation.every_n_steps", "dataset", "resume"} <= set(keys)


def test_docs_command_refuses_a_file_it_cannot_read_in_one_line(tmp_path, capsys):
    # `--help` and a missing or folder path were read as the README: a FileNotFoundError / IsADirectoryError traceback
    from torchtune_longshort.training.recipe_config.docs import main

    with pytest.raises(SystemExit) as e:
        main(["--help"])
    assert e.value.code == 0 and "rewrite" in capsys.readouterr().out
    for bad in (tmp_path / "missing.md", tmp_path):
        assert main([str(bad)]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and str(bad) in err and "cannot be read" in err
    assert not (tmp_path / "missing.md").exists()
