"""A study config field declared once (YAML key, default, doc, check), as the recipe's are
(:mod:`torchtune_longshort.config.fields`, whose :func:`build_section` builds both), and the way back
from a typed section to the plain mapping the study records (``study.json``, a run's ``spec``).

Two things only a study needs: a field ``written_if_set`` is left out of that mapping while it is unset (the records
keep the keys they always had: a run's ``spec`` is compared with the one its ``result.json`` holds), and a field
whose check reads ``names`` only (RoPE method names, task metadata keys) is also checked in the ``quick`` overlay,
which is otherwise checked for its keys alone (:func:`~torchtune_longshort.study.schema.check_keys`).
"""

from __future__ import annotations

from dataclasses import field, fields, is_dataclass
from typing import Any, Dict, Optional

from torchtune_longshort.config.fields import REQUIRED, Check, Section, yaml_key
from torchtune_longshort.config.fields import setting as recipe_setting


def setting(default: Any = REQUIRED, *, doc: str, check: Optional[Check] = None, section: Optional[type] = None,
            nullable: bool = False, written_if_set: bool = False, names: bool = False) -> Any:
    """A dataclass field of a study config section: :func:`torchtune_longshort.config.fields.setting` plus
    ``written_if_set`` (left out of :meth:`StudySection.as_dict` while None) and ``names`` (its check reads names
    only, and also runs on the ``quick`` overlay)."""
    meta = dict(recipe_setting(default, doc=doc, check=check, section=section, nullable=nullable).metadata)
    return field(default=None, metadata={**meta, "written_if_set": written_if_set, "names": names})


class StudySection(Section):
    """A frozen dataclass of :func:`setting` fields that can be written back as the mapping it was built from."""

    def as_dict(self) -> Dict[str, Any]:
        """The section as YAML keys to plain values, defaults filled (the study's records hold this)."""
        out: Dict[str, Any] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if "doc" in f.metadata and not (value is None and f.metadata.get("written_if_set")):
                out[yaml_key(f)] = plain(value)
        return out


def plain(value: Any) -> Any:
    """``value`` with every typed section in it turned into its :meth:`~StudySection.as_dict` mapping."""
    if is_dataclass(value) and hasattr(value, "as_dict"):
        return value.as_dict()
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value
