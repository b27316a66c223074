"""The paths a recipe config names, expanded and resolved once, before anything reads them: ``~``, a relative path
(against the working directory) and symlinks. A run started as ``output_dir=~/runs/x`` writes to ``$HOME/runs/x``
(not to a folder named ``~``), and the nodes that interpolate ``${output_dir}`` / ``${checkpoint_dir}`` (the
checkpointer's, the metric logger's ``log_dir``) get the resolved path too.

Resolved: ``output_dir``, ``checkpoint_dir``, ``checkpointer.checkpoint_dir`` / ``output_dir``, ``tokenizer.path``,
``metric_logger.log_dir``, ``profiler.output_dir`` and every model node's ``checkpoint_dir``. A data source's
arguments are left as given: ``path`` or ``source`` may name a Hugging Face dataset, not a file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Mapping

from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import InterpolationResolutionError

TOP_LEVEL = ("output_dir", "checkpoint_dir")  # resolved first: the nodes below interpolate them
NESTED = ("checkpointer.checkpoint_dir", "checkpointer.output_dir", "tokenizer.path", "metric_logger.log_dir",
          "profiler.output_dir")


def resolve_path(value: str) -> str:
    """``value`` with ``~`` expanded, made absolute against the working directory, symlinks resolved."""
    return str(Path(os.path.expanduser(value)).resolve())


def resolved_container(cfg: Any) -> dict:
    """``cfg`` as a plain dict, its interpolations resolved; one that names a key the config lacks (``~output_dir``,
    which ``checkpointer.output_dir: ${output_dir}`` names) refused naming both, with the fix (OmegaConf's own text
    named neither)."""
    try:
        return OmegaConf.to_container(cfg if OmegaConf.is_config(cfg) else OmegaConf.create(cfg), resolve=True)
    except InterpolationResolutionError as e:
        raise ValueError(f"{e.full_key}: {str(e.msg).splitlines()[0]}: its value refers to that key (${{...}}), which "
                         f"the config does not have; set it, or give {e.full_key} a value of its own") from None


def _resolve_key(node: DictConfig, key: str) -> None:
    value = OmegaConf.select(node, key, default=None, throw_on_resolution_failure=False)
    if isinstance(value, str) and value.strip():
        OmegaConf.update(node, key, resolve_path(value), merge=False)


def _model_nodes(node: Any, where: str):
    if isinstance(node, Mapping):
        yield where
        inner = node.get("model")
        if isinstance(inner, Mapping):
            yield from _model_nodes(inner, f"{where}.model")


def resolved_config(cfg: Any) -> DictConfig:
    """A copy of the recipe config ``cfg`` (a ``DictConfig`` or a mapping) with its paths resolved (see the module
    doc); interpolations other than those paths are kept."""
    plain = OmegaConf.to_container(cfg, resolve=False) if isinstance(cfg, DictConfig) else dict(cfg)
    node = OmegaConf.create(plain)
    for key in TOP_LEVEL:
        if key in node:
            _resolve_key(node, key)
    for key in NESTED:
        _resolve_key(node, key)
    model = resolved_container(node).get("model") if "model" in node else None
    for where in _model_nodes(model, "model"):
        _resolve_key(node, f"{where}.checkpoint_dir")
    return node
