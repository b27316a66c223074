"""The tiny from-checkpoint recipe config, filled in for a test (shared by the in-process recipe tests)."""

from __future__ import annotations

from pathlib import Path

import pytest
from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
CFG = REPO / "configs" / "tiny" / "longshort_from_checkpoint.yaml"


def make_cfg(ckpt, tok, out, **over):
    """The config with its checkpoint, tokenizer and output folder set, no validation, ``over`` applied (a mapping
    or list value replaces the node, as a new node would)."""
    cfg = OmegaConf.load(CFG)
    cfg.checkpoint_dir = str(ckpt) if ckpt is not None else None
    cfg.tokenizer.path = str(Path(tok) / "tokenizer.model")
    cfg.output_dir = str(out)
    cfg.validation = None
    for k, v in over.items():
        OmegaConf.update(cfg, k, v, force_add=True, merge=not isinstance(v, (dict, list)))
    return cfg


def train_rows(cfg) -> list:
    """Train ``cfg`` in this process (set up, train, its output folder released) and give its ``metrics.jsonl``
    rows."""
    import json

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    recipe = LongShortFinetuneRecipe(cfg)
    recipe.setup()
    try:
        recipe.train()
    finally:
        recipe.release_output_dir()
    lines = (Path(cfg.output_dir) / "metrics.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def train_until_fault(run, error, match: str, out: Path) -> int:
    """Train ``run`` (set up) until a data fault ``error`` (its message matching ``match``) stops it at the last
    good step; that step, whose checkpoint and recipe state the fault must have saved."""
    with pytest.raises(error, match=match) as err:
        run.train()
    run.release_output_dir()
    stopped = run.global_step
    assert f"step_{stopped}" in str(err.value)
    assert (Path(out) / "recipe_state" / f"step_{stopped}.pt").is_file()
    return stopped
