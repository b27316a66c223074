"""Whether ``validation.dataset`` reads files ``dataset`` trains on (its ``val_ce`` is then partly measured on
training text): said in one warning line by the config check (``longshort-validate`` and ``tune run`` alike), not
refused (a user may mean it; the eval side says the same of a stdlib eval source,
:mod:`torchtune_longshort.data.stdlib_overlap`, whose file lists this asks). Known without reading a file: the stdlib
selections' files, and ``corpus.local_text``'s listed paths; other sources (hub datasets, torchtune builders) name no
file list here and are not compared."""

from __future__ import annotations

import inspect
import logging
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from torchtune_longshort.config.values import resolve_component
from torchtune_longshort.data.corpus import TEXT_SUFFIXES, local_text, stdlib
from torchtune_longshort.data.file_kinds import record_suffixes
from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.data.stdlib_corpus import SELECTION_KEYS, STDLIB_SOURCES, stdlib_dir
from torchtune_longshort.data.stdlib_overlap import selection_files
from torchtune_longshort.launcher import launched_rank

logger = logging.getLogger(__name__)


def _selection(source: Any) -> Optional[Dict[str, Any]]:
    """The stdlib selection a ``corpus.stdlib`` node reads (its signature's defaults for the keys it leaves out)."""
    if resolve_component("_component_", source.component) is not stdlib:
        return None
    params = inspect.signature(stdlib).parameters
    return {k: source.args.get(k, params[k].default) for k in SELECTION_KEYS}


def _files(source: Any, where: str) -> List[Path]:
    """The files the data source node ``source`` reads, resolved, where they are known without reading them."""
    selection = _selection(source)
    if selection is not None:
        root = stdlib_dir()
        return [(root / rel).resolve() for rel in sorted(selection_files(selection))]
    if resolve_component("_component_", source.component) is local_text and "path" in source.args:
        suffixes = source.args.get("suffixes", TEXT_SUFFIXES)
        suffixes = [suffixes] if isinstance(suffixes, str) else list(suffixes)
        return [p.resolve() for p in resolve_files(source.args["path"], [*suffixes, *record_suffixes()],
                                                    f"{where}.path")]
    return []


def _stdlib_fix(train: Dict[str, Any], val: Dict[str, Any]) -> Optional[str]:
    """The fewest keys that hold two stdlib selections apart: a stdlib source held out from ``train`` for
    validation, else the train / heldout split of both (None when neither leaves validation files)."""
    candidates: List[Tuple[Dict[str, Any], Dict[str, Any]]] = [({}, args) for args in STDLIB_SOURCES.values()]
    candidates.append(({"split": "train"}, {"split": "heldout"}))
    for train_over, val_over in candidates:
        read = selection_files({**val, **val_over})
        if read and not read & selection_files({**train, **train_over}):
            changed = [f"dataset.{k}={v}" for k, v in train_over.items() if train.get(k) != v]
            changed += [f"validation.dataset.{k}={v}" for k, v in val_over.items() if val.get(k) != v]
            return " with ".join(changed)
    return None


def warn_validation_overlap(config: Any) -> Optional[str]:
    """Log (and return) one line when ``config.validation.dataset`` reads files ``config.dataset`` reads: both keys,
    how many files of validation's, and the keys that hold them apart."""
    val = config.validation
    if val is None:
        return None
    val_files = _files(val.dataset, "validation.dataset")
    trained = set(_files(config.dataset, "dataset")) if val_files else set()
    shared = [f for f in val_files if f in trained]
    if not shared:
        return None
    train_sel, val_sel = _selection(config.dataset), _selection(val.dataset)
    fix = _stdlib_fix(train_sel, val_sel) if train_sel is not None and val_sel is not None else None
    line = (f"validation.dataset reads {len(shared)} of its {len(val_files)} files from the text dataset trains on "
            f"(first: {shared[0]}): val_ce is then measured partly on training text; hold them apart: "
            f"{fix or 'give validation.dataset files dataset does not read'} (or keep it, to measure on trained text)")
    if launched_rank() == 0:  # every process of a launch checks the config: said once
        logger.warning(line)
    return line
