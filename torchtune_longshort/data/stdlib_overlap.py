"""Whether a stdlib evaluation source reads text the evaluated checkpoint was trained on.

The stdlib sources (:data:`~torchtune_longshort.data.stdlib_corpus.STDLIB_SOURCES`) are selections of the same files,
and a run's ``dataset`` is one too (``corpus.stdlib``'s ``include_tests`` / ``split`` / ``limit`` / ``min_bytes``):
``stdlib_heldout`` is held out from a run read with ``split: train``, but a run read with ``include_tests: False`` and
no ``split`` (the SmolLM2 configs) trained on two thirds of its non-test files. A recipe step folder
(``<run>/step_<k>``, or its ``adapter/``) sits in the run folder whose ``torchtune_config.yaml`` records that
``dataset``; :func:`overlap_warning` compares the two selections' files and says, in one line, which source the
run holds out instead. Nothing is refused: a user may mean to measure on trained text.
"""

from __future__ import annotations

import functools
import inspect
from pathlib import Path
from typing import Any, Callable, Dict, FrozenSet, Iterable, List, Optional, Set, Tuple

from torchtune_longshort.data.stdlib_corpus import (
    SELECTION_KEYS, STDLIB_SOURCES, stdlib_dir, stdlib_source_files)

# The file torchtune's metric logger writes the run's config to, in the run folder beside its step_<k> folders; its
# one spelling here (training.written_files imports it: data sits below training).
RUN_CONFIG = "torchtune_config.yaml"
# The model_args keys that name a checkpoint folder (longshort: checkpoint_dir / pretrained; hf: pretrained, peft).
CHECKPOINT_KEYS = ("checkpoint_dir", "pretrained", "peft")
_warned: Set[Tuple[str, str, str]] = set()


def run_config_of(checkpoint: Any) -> Optional[Path]:
    """The ``torchtune_config.yaml`` of the run that saved the checkpoint folder ``checkpoint`` (a step folder: its
    parent's; a LoRA step's ``adapter/``: the step's parent's); None for any other folder or path."""
    if not isinstance(checkpoint, (str, Path)) or not str(checkpoint):
        return None
    folder = Path(checkpoint).expanduser()
    if not folder.is_dir():
        return None
    folder = folder.resolve()
    ups = [folder.parent] + ([folder.parent.parent] if (folder / "adapter_config.json").is_file() else [])
    return next((up / RUN_CONFIG for up in ups if (up / RUN_CONFIG).is_file()), None)


def trained_selection(run_config: Path) -> Optional[Tuple[Dict[str, Any], Dict[str, Any]]]:
    """``(selection, given)`` of the stdlib files the run recorded in ``run_config`` trained on: ``selection`` its
    :data:`SELECTION_KEYS` as the dataset component reads them (its signature's defaults for those left out),
    ``given`` those the config sets. None when its ``dataset`` reads no stdlib selection (or cannot be read)."""
    from omegaconf import OmegaConf

    # deferred: torch (the eval tasks import this module without it; only a recorded run's component needs it)
    from torchtune_longshort.config.values import resolve_component

    try:
        cfg = OmegaConf.load(run_config)
        node = cfg.get("dataset") if OmegaConf.is_dict(cfg) else None
        try:
            data = OmegaConf.to_container(node, resolve=True) if node is not None else None
        except Exception:  # noqa: BLE001  (an interpolation into a key of no interest here)
            data = OmegaConf.to_container(node, resolve=False)
        component = (resolve_component("dataset._component_", data.get("_component_")) if isinstance(data, dict)
                     else None)
        params = inspect.signature(component).parameters if component is not None else {}
    except Exception:  # noqa: BLE001  (a config that does not read or name a component: no record to compare)
        return None
    if not all(k in params for k in SELECTION_KEYS):
        return None
    given = {k: data[k] for k in SELECTION_KEYS if k in data}
    return {k: given.get(k, params[k].default) for k in SELECTION_KEYS}, given


def selection_files(selection: Dict[str, Any]) -> FrozenSet[str]:
    """The stdlib files (paths relative to the stdlib folder) ``stdlib_source_files(**selection)`` reads; none when
    it reads none or cannot take the selection. Listed once per process and selection: a task asks at each of its
    lengths, for the run's selection and every stdlib source's."""
    return _listed(tuple(sorted(selection.items())))


@functools.lru_cache(maxsize=None)
def _listed(selection: Tuple[Tuple[str, Any], ...]) -> FrozenSet[str]:
    root = stdlib_dir()
    try:
        return frozenset(p.relative_to(root).as_posix() for p in stdlib_source_files(**dict(selection)))
    except (FileNotFoundError, ValueError, TypeError):
        return frozenset()


def _keys_text(selection: Dict[str, Any], given: Dict[str, Any]) -> str:
    shown = [k for k in SELECTION_KEYS if k in given or k in ("include_tests", "split")]
    return ", ".join(f"dataset.{k}={_yaml(given[k])}" if k in given else f"dataset.{k} unset ({_yaml(selection[k])})"
                     for k in shown)


def _yaml(value: Any) -> str:
    return "null" if value is None else str(value)


def overlap_warning(source: str, checkpoints: Iterable[Any], setting: str) -> Optional[str]:
    """One line saying that the stdlib source ``source`` (given as ``setting``: ``ppl_source``, ``--data``) holds
    files the run that saved one of ``checkpoints`` trained on, naming the run's dataset keys and the stdlib sources
    held out from it; None when ``source`` is no stdlib source, no checkpoint is a recorded run's, or no file is
    shared."""
    if source not in STDLIB_SOURCES:
        return None
    for checkpoint in checkpoints:
        config = run_config_of(checkpoint)
        recorded = trained_selection(config) if config else None
        if recorded is None:
            continue
        trained = selection_files(recorded[0])
        read = selection_files(STDLIB_SOURCES[source])
        shared = read & trained
        if not shared:
            return None
        held_out = [name for name, args in STDLIB_SOURCES.items()
                    if (files := selection_files(args)) and not files & trained]
        instead = (f"held out from it: {' or '.join(f'{setting}={n}' for n in held_out)}" if held_out else
                   "no stdlib source is held out from it: evaluate on local text it never read")
        return (f"{setting}={source} overlaps the text {checkpoint} was trained on: {len(shared)} of the {len(read)} "
                f"files it reads are in that run's training data ({config}: {_keys_text(*recorded)}); {instead}")
    return None


def warn_overlap(source: str, checkpoints: Iterable[Any], setting: str, warn: Callable[[str], None]) -> Optional[str]:
    """:func:`overlap_warning`'s line, handed to ``warn`` once per process for each source, setting and run (a task
    builds its samples once per length); returned every time, for a record."""
    paths: List[Any] = list(checkpoints)
    line = overlap_warning(source, paths, setting)
    if line is not None:
        key = (setting, source, str([run_config_of(p) for p in paths]))
        if key not in _warned:
            _warned.add(key)
            warn(line)
    return line
