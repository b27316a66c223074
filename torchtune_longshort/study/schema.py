"""The keys of a study YAML (or of another study experiment's, table1's) that no single section checks: its top level
and its ``quick`` overlay.

:func:`check_keys` refuses an unknown key anywhere in the YAML, the ``quick`` overlay included (``alpha:`` for
``alphas:``, ``eval.ppl_num_sample``), with the nearest known one; the known keys are the sections' own fields
(:class:`~torchtune_longshort.study.config.StudyConfig` and its sections), and the fields whose check reads names (a
``methods`` entry's RoPE method, ``eval.metadata`` keys) are checked there too. It runs in
:func:`~torchtune_longshort.study.config.read_config`, before any value is read. (The recipe configs the runs will be
trained with are the plan's to check: :func:`~torchtune_longshort.study.run_configs.check_recipe_overrides`.)
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from torchtune_longshort.config.fields import section_keys
from torchtune_longshort.config.unknown_keys import refuse_unknown

# top-level keys of the YAML that are not fields: the --quick overlay and the `tune validate` marker
_NOT_FIELDS = ("quick", "not_a_torchtune_config")
# fields the loader sets (never in the quick overlay)
_SET_BY_LOADER = ("quick",)


def _walk(cls: type, node: Any, where: str, extra: Iterable[str] = (), skip: Iterable[str] = ()) -> None:
    """Unknown keys of ``node`` against section ``cls``'s fields, nested sections included; the ``names`` checks."""
    if not isinstance(node, Mapping):
        return
    known = {k: f for k, f in section_keys(cls).items() if k not in skip}
    refuse_unknown([k for k in node if k not in known and k not in extra], list(known) + list(extra), where)
    for key, value in node.items():
        f = known.get(key)
        if f is None or value is None:
            continue
        path = f"{where}.{key}" if where else key
        if f.metadata["section"] is not None:
            _walk(f.metadata["section"], value, path)
        elif f.metadata.get("names"):
            f.metadata["check"](path, value)


def check_keys(cls: type, raw: Mapping[str, Any]) -> None:
    """Unknown keys at every level of a YAML whose top level is section ``cls`` and of its ``quick`` overlay (which
    holds keys of the same levels), and the fields whose check reads names only (RoPE method names, task metadata
    keys)."""
    _walk(cls, raw, "", extra=_NOT_FIELDS, skip=_SET_BY_LOADER)
    if isinstance(raw.get("quick"), Mapping):
        _walk(cls, raw["quick"], "quick", skip=_SET_BY_LOADER)
