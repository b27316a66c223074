"""Every model node of a shipped config that holds LoRA keys, or that its header tells a user to give them, has them
checked by the recipe's config check (what ``longshort-validate`` runs): a bad value there is refused naming the key
as the config spells it (``model.lora_dropout``, ``model.model.lora_attn_modules``). The paths come from the YAML
itself, not from the check's own walk."""

from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.training.recipe_config import load_recipe_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
HEADER_LORA = re.compile(r"\b(model(?:\.model)*)\.lora_rank=(\d+) +\1\.lora_alpha=(\d+)")


def _lora_nodes(node, where="model"):
    """``(path, {})`` of each component node under ``model`` that sets ``lora_rank`` (no key to add)."""
    if isinstance(node, dict) and "_component_" in node:
        if "lora_rank" in node:
            yield where, {}
        for k, v in node.items():
            yield from _lora_nodes(v, f"{where}.{k}")


def _cases():
    for path in sorted(CONFIGS.rglob("*.yaml")):
        name = str(path.relative_to(CONFIGS))
        if name.startswith(("study/", "synthetic/")):
            continue
        text = path.read_text()
        cfg = yaml.safe_load(text)
        found = list(_lora_nodes(cfg.get("model")))
        comments = "\n".join(line for line in text.splitlines() if line.lstrip().startswith("#"))
        found += [(m[1], {"lora_rank": int(m[2]), "lora_alpha": int(m[3])})
                  for m in HEADER_LORA.finditer(" ".join(comments.replace("#", " ").split()))]
        for where, extra in found:
            yield pytest.param(cfg, where, extra, id=f"{name}:{where}")


def _at(cfg, where, **keys):
    cfg = copy.deepcopy(cfg)
    node = cfg
    for part in where.split("."):
        node = node[part]
    node.update(keys)
    return cfg


CASES = list(_cases())


def test_the_clex_headers_lora_is_among_the_cases():
    # the clex configs set no LoRA key; their header gives one (model.model.lora_rank=64 model.model.lora_alpha=128)
    assert any(c.id.startswith("llama2_7b/clex_") and c.id.endswith(":model.model") for c in CASES)


@pytest.mark.parametrize("cfg,where,extra", CASES)
def test_a_bad_lora_value_is_refused_naming_the_key_where_the_config_has_it(cfg, where, extra):
    load_recipe_config(_at(cfg, where, **extra), local=False)  # as shipped (or as its header says): accepted
    for key, value in (("lora_dropout", -0.1), ("lora_attn_modules", ["o_projj"])):
        with pytest.raises(ValueError) as err:
            load_recipe_config(_at(cfg, where, **extra, **{key: value}), local=False)
        message = str(err.value)
        assert message.startswith(f"{where}.{key}") and "\n" not in message, message
