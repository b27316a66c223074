"""The recipe's typed config: every field declared once (default, doc, check) and built once, before any side effect.

:func:`load_recipe_config` turns the OmegaConf node into a :class:`RecipeConfig`: unknown keys refused at every level
with "did you mean" (torchtune's own names too), each value checked with its field named, each ``_component_`` node
checked before it is built where its arguments can be, then the rules between fields (:mod:`.rules`) and the
output folder's inputs (:mod:`.inputs`). Nothing here creates a file or a folder.
"""

from __future__ import annotations

from typing import Any

from torchtune_longshort.training.recipe_config.fields import build_section
from torchtune_longshort.training.recipe_config.inputs import check_overwrite, input_paths, written_names
from torchtune_longshort.training.recipe_config.recipe import RecipeConfig
from torchtune_longshort.training.recipe_config.rules import (
    check_built_model, check_rules, check_tokenizer_vocab, declared_vocab,
)
from torchtune_longshort.training.recipe_config.unknown_keys import ConfigKeyError


def load_recipe_config(cfg: Any, world_size: int = 1) -> RecipeConfig:
    """The checked, typed config of an OmegaConf node (or a plain mapping) for a run on ``world_size`` processes.

    Raises ``ConfigKeyError`` (a ``KeyError``) for unknown or missing keys, ``ValueError`` /
    ``FileNotFoundError`` / ``FileExistsError`` naming the field for values, before any side effect."""
    from omegaconf import DictConfig, OmegaConf

    node = OmegaConf.to_container(cfg, resolve=True) if isinstance(cfg, DictConfig) else dict(cfg)
    config = build_section(RecipeConfig, node)
    check_rules(config, world_size)
    check_overwrite(config)
    return config


__all__ = ["ConfigKeyError", "RecipeConfig", "check_built_model", "check_tokenizer_vocab", "declared_vocab", "input_paths",
           "load_recipe_config", "written_names"]
