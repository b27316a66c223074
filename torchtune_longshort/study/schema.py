"""The keys a study YAML may hold, at every level, and the checks that need the recipe or the registries.

:func:`check_study_keys` refuses an unknown key anywhere (``alpha:`` for ``alphas:``, ``eval.ppl_num_sample``) with
the nearest known one, the recipe config's own machinery (``training.recipe_config.unknown_keys``) giving the hint; a
``methods`` entry's ``method`` must be a RoPE method of the registry; ``eval.metadata`` keys must belong to a task
of the pack. :func:`check_recipe_overrides` builds the recipe config of the pre-training and of one run of every
method and variant, as the runner will write them, and checks them against the recipe's typed config
(``training.recipe_config``), so ``save_every_n_step`` in ``finetune.overrides`` is refused before the base trains.
Both run in :func:`~torchtune_longshort.study.config.load_study_config`, before anything is trained.
"""

from __future__ import annotations

import difflib
from pathlib import Path
from typing import Any, Dict, Iterable, Optional

from torchtune_longshort.training.recipe_config.unknown_keys import ConfigKeyError, refuse_unknown

TOP = ("not_a_torchtune_config", "name", "output_dir", "recipe", "recipe_config", "recipe_overrides", "L0", "L", "base",
       "model", "finetune", "methods", "alphas", "seeds", "eval", "quick", "jobs", "variants", "timeout_s",
       "config_path")
BASE = ("checkpoint_dir", "tokenizer", "pretrain", "gate_measure", "min_ppl_ratio")
PRETRAIN = ("max_steps", "overrides")
FINETUNE = ("max_steps", "overrides")
EVAL = ("ppl_lengths", "passkey_lengths", "misalignment_lengths", "ppl_num_samples", "passkey_num_samples",
        "mis_num_samples", "ppl_source", "batch_size", "device", "dtype", "babilong", "longbench_e_data_dir",
        "eval_base", "include_path", "max_length", "metadata")
BABILONG = ("lengths", "depths", "n", "qa", "haystack")
VARIANT = {"e_range": ("method", "alpha", "ranges"), "divergence": ("method", "alphas", "divergences"),
           "equal_compute": ("method", "alpha", "overhead")}


def _keys(node: Any, known: Iterable[str], where: str) -> None:
    if isinstance(node, dict):
        refuse_unknown([k for k in node if k not in known], known, where)


def _method_name(where: str, method: Any) -> None:
    from torchtune_longshort.rope import ROPE_METHODS

    if method not in ROPE_METHODS:
        near = difflib.get_close_matches(str(method), list(ROPE_METHODS), n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise ValueError(f"{where}.method={method!r} is not a RoPE method{hint}: expected one of "
                         f"{sorted(ROPE_METHODS)} (torchtune_longshort.rope.ROPE_METHODS)")


def _metadata(where: str, metadata: Any) -> None:
    """``eval.metadata`` keys belong to a task of the pack: its ``<prefix>_...`` keys or its data folder key."""
    from torchtune_longshort.eval.tasks import TASK_FAMILIES

    if not isinstance(metadata, dict):
        return
    prefixes = sorted({f.metadata_prefix + "_" for f in TASK_FAMILIES.values() if f.metadata_prefix})
    own = {f.data_dir_key for f in TASK_FAMILIES.values() if f.data_dir_key} | {"max_seq_lengths"}
    bad = [k for k in metadata if k not in own and not any(str(k).startswith(p) for p in prefixes)]
    if bad:
        raise ConfigKeyError(f"unknown config key(s) in {where}: {bad}: no task of the pack reads them (a task's keys "
                             f"start with its prefix: {', '.join(prefixes)}; or one of {sorted(own)})")


def check_study_keys(raw: Dict[str, Any], where: str = "") -> None:
    """Unknown keys at every level of a study YAML (``quick`` holds keys of the same levels), RoPE method names."""
    at = (lambda k: f"{where}.{k}" if where else k)
    _keys(raw, TOP if not where else [k for k in TOP if k not in ("quick", "not_a_torchtune_config")], where)
    base = raw.get("base")
    _keys(base, BASE, at("base"))
    if isinstance(base, dict):
        _keys(base.get("pretrain"), PRETRAIN, at("base.pretrain"))
    _keys(raw.get("finetune"), FINETUNE, at("finetune"))
    ev = raw.get("eval")
    _keys(ev, EVAL, at("eval"))
    if isinstance(ev, dict):
        _keys(ev.get("babilong"), BABILONG, at("eval.babilong"))
        _metadata(at("eval.metadata"), ev.get("metadata"))
    for name, spec in (raw.get("methods") or {}).items():
        if isinstance(spec, dict) and "method" in spec:
            _method_name(at(f"methods.{name}"), spec["method"])
    for name, v in (raw.get("variants") or {}).items():
        if name in VARIANT:
            _keys(v, VARIANT[name], at(f"variants.{name}"))
    if not where and isinstance(raw.get("quick"), dict):
        check_study_keys(raw["quick"], "quick")


def check_recipe_overrides(cfg: Dict[str, Any], repo_root: Optional[Path] = None) -> None:
    """The recipe config of the pre-training and of one run per method and variant, as the runner writes them,
    built with the recipe's typed config (keys and values; files that do not exist yet are not asked for)."""
    from omegaconf import OmegaConf

    from torchtune_longshort.study.config import grid
    from torchtune_longshort.study.runner import Study
    from torchtune_longshort.training.recipe_config import RecipeConfig
    from torchtune_longshort.training.recipe_config.fields import build_section

    study = Study(cfg, output_dir="/nonexistent/study-check", repo_root=repo_root)
    seen, todo = set(), []
    if not (cfg.get("base") or {}).get("checkpoint_dir"):
        todo.append(("base", None, "base.pretrain.overrides / recipe_overrides"))
    for run in grid(cfg):
        kind = (run["method"], run["variant"])
        if kind not in seen:
            seen.add(kind)
            todo.append((run["key"], run, f"finetune.overrides / methods.{run['method']}"
                                          + (f" / variants.{run['variant']}" if run["variant"] else "")))
    for key, run, source in todo:
        node = OmegaConf.to_container(OmegaConf.create(study.recipe_config(key, run)), resolve=True)
        try:
            build_section(RecipeConfig, node, local=False)
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"the recipe config of run {key} (from recipe_config, {source}) is refused by the "
                             f"recipe: {e}") from None
