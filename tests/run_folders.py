"""Run folders as the recipe leaves them, for the tests of what overwrite and resume may delete."""

from __future__ import annotations

import shutil
from pathlib import Path

from omegaconf import OmegaConf

REPO = Path(__file__).resolve().parents[1]
TINY = REPO / "configs" / "tiny" / "longshort_stdlib.yaml"
SMALL = {"max_steps": 2, "seq_len": 64, "batch_size": 2, "validation": None}


def tiny_cfg(out, tokenizer_dir, **over):
    """``configs/tiny/longshort_stdlib.yaml`` at the small sizes, its tokenizer the session's (nothing trained),
    ``over`` applied (a mapping value replaces the node)."""
    cfg = OmegaConf.load(TINY)
    cfg.output_dir = str(out)
    cfg.tokenizer.path = str(tokenizer_dir)
    for k, v in {**SMALL, **over}.items():
        OmegaConf.update(cfg, k, v, force_add=True, merge=not isinstance(v, dict))
    return cfg


def recipe_made(folder: Path) -> Path:
    """A folder as an earlier run of the recipe leaves it (its marker, its metrics): overwrite may replace it."""
    folder.mkdir(parents=True)
    (folder / ".longshort_output").write_text("")
    (folder / "metrics.jsonl").write_text("{}\n")
    return folder


def tree(folder: Path):
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def commit_step(run: Path, step: int, source: Path, state: bool = True) -> Path:
    """``source``'s files (a checkpoint folder) committed as ``run/step_<step>`` the way the recipe saves (its weights
    as the writer names them: one shard and its index), an adapter file in a subfolder besides, and (``state``) its
    recipe state."""
    import json

    from safetensors import safe_open

    from torchtune_longshort.training.checkpointing import StepCheckpoints, staged_state_path
    from torchtune_longshort.training.staging import start_staged

    ckpts = StepCheckpoints(run, keep=5)
    staged = ckpts.staging_root / f"step_{step}"
    start_staged(staged)
    shutil.copytree(source, staged, dirs_exist_ok=True)
    if (staged / "model.safetensors").is_file():
        shard = "model-00001-of-00001.safetensors"
        with safe_open(str(staged / "model.safetensors"), "pt") as f:
            index = {"metadata": {}, "weight_map": {k: shard for k in f.keys()}}
        (staged / "model.safetensors").rename(staged / shard)
        (staged / "model.safetensors.index.json").write_text(json.dumps(index))
    (staged / "adapter").mkdir()
    (staged / "adapter" / "adapter_config.json").write_text("{}")
    if state:
        staged_state_path(staged).write_bytes(b"state")
    return ckpts.commit(staged, step)


OLD_NS = 1_500_000_000_123_456_789  # a time (2017) no command can give a folder it touches


def stat_tree(folder: Path):
    """Every path under ``folder`` (``folder`` too) with its size and mtime_ns: what a refusal must leave as it was."""
    return [(str(p.relative_to(folder)), p.lstat().st_size, p.lstat().st_mtime_ns)
            for p in [folder, *sorted(folder.rglob("*"))]]


def aged(folder: Path):
    """``folder``'s every entry given an old mtime (a change made within the same clock tick shows), then its
    :func:`stat_tree`."""
    import os

    for p in [*sorted(folder.rglob("*"), reverse=True), folder]:
        os.utime(p, ns=(OLD_NS, OLD_NS), follow_symlinks=False)
    return stat_tree(folder)
