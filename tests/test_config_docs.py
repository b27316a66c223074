"""The README's recipe-config table is the one generated from the dataclasses, and every field has a doc."""

from __future__ import annotations

from pathlib import Path

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
