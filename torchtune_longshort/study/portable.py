"""A record's ``spec`` (what a run's or a cell's result depends on) with this machine's folders named by place, so
that a study's records still count after its folder moves: committed on one machine, cloned on the next, or a base
model cached under another home. A spec is compared by :func:`same_spec`, which reads an older record's absolute
paths the same way, so records written before specs were portable still count where their folders have not moved.

The places: the study's (or Table 1's) output folder ``<study>``, the converted-model cache ``<model cache>``
(:func:`torchtune_longshort.models.gguf_cache.cache_dir`, where a ``pypi:`` base lands) and the repository root
``<repo>``; the longest matching folder names a path."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Dict

from torchtune_longshort.models.gguf import cache_dir

STUDY, MODEL_CACHE, REPO = "<study>", "<model cache>", "<repo>"


def places(out: Path, root: Path) -> Dict[str, str]:
    """The folders a spec's paths are named by: place -> this machine's absolute folder."""
    return {STUDY: str(Path(out).resolve()), MODEL_CACHE: str(cache_dir().expanduser().resolve()),
            REPO: str(Path(root).resolve())}


def portable(value: Any, where: Dict[str, str]) -> Any:
    """``value`` (a spec: dicts, lists, strings, numbers) with each string that is one of ``where``'s folders or a
    path inside one written as ``<place>/rest``: the longest folder that holds it names it, read resolved as the
    places are (``os.path.realpath``: ``--out out/../out`` or a link to the study's folder was
    ``<study>/../out/...`` or no place, and a rerun under that spelling trained every run of the grid again)."""
    if isinstance(value, dict):
        return {k: portable(v, where) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, where) for v in value]
    if not isinstance(value, str) or not value.startswith(os.sep):
        return value
    named = _named(os.path.realpath(value), where)  # the places are resolved: so is the path named by them
    if named is None:
        named = _named(value, where)
    return value if named is None else named


def _named(value: str, where: Dict[str, str]) -> Any:
    """``value`` as ``<place>/rest`` by the longest of ``where``'s folders that holds it; None where none does."""
    for place, folder in sorted(where.items(), key=lambda kv: -len(kv[1])):
        if value == folder:
            return place
        if value.startswith(folder.rstrip(os.sep) + os.sep):
            return place + "/" + value[len(folder.rstrip(os.sep)) + 1:]
    return None


def same_spec(recorded: Any, spec: Any, where: Dict[str, str]) -> bool:
    """Whether a record's ``spec`` is ``spec``, both read by ``where``'s places: a record written with this machine's
    absolute paths (before specs were portable) counts where its folders have not moved."""
    return portable(recorded, where) == portable(spec, where)


def same_where_it_was(recorded: Any, spec: Any, where: Dict[str, str], was: str) -> bool:
    """Whether ``recorded``, written with this machine's absolute paths while the study's folder was ``was`` (a run's
    ``recipe.yaml``: the recipe reads absolute paths), is ``spec``: both read by place, ``recorded``'s study folder
    being ``was``. A study copied or moved elsewhere then retrains nothing for its new paths alone."""
    return portable(recorded, {**where, STUDY: was}) == portable(spec, where)
