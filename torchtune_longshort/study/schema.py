"""The refusals of a study YAML that are not a single section's: the keys of the ``quick`` overlay, and the recipe
configs the runs will be trained with.

:func:`check_study_keys` refuses an unknown key anywhere in the YAML, the ``quick`` overlay included (``alpha:`` for
``alphas:``, ``eval.ppl_num_sample``), with the nearest known one; the known keys are the study sections' own fields
(:mod:`torchtune_longshort.study.config`), and the fields whose check reads names (a ``methods`` entry's RoPE
method, ``eval.metadata`` keys) are checked there too. :func:`check_recipe_overrides` builds the recipe config of the
pre-training and of one run of every method and variant, as the runner will write them, and checks them against the
recipe's typed config (``training.recipe_config``), so ``save_every_n_step`` in ``finetune.overrides`` is refused
before the base trains. Both run in :func:`~torchtune_longshort.study.config.load_study_config`, before anything is
trained.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping, Optional

from torchtune_longshort.training.recipe_config.fields import section_keys
from torchtune_longshort.training.recipe_config.unknown_keys import refuse_unknown

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


def check_study_keys(raw: Mapping[str, Any]) -> None:
    """:func:`check_keys` of a study YAML."""
    from torchtune_longshort.study.config import StudyConfig

    check_keys(StudyConfig, raw)


def check_recipe_overrides(cfg, repo_root: Optional[Path] = None) -> None:
    """The recipe config of the pre-training and of every run of the
    :class:`~torchtune_longshort.study.config.StudyConfig` ``cfg`` (one per method, variant and alpha: runs that differ
    only in their seed differ in no rule), as the runner writes them, checked by the recipe's own config check
    (:func:`~torchtune_longshort.training.recipe_config.load_recipe_config`: keys, values and the rules between
    fields; files that do not exist yet are not asked for), before the base trains."""
    from torchtune_longshort.study.runner import Study

    study = Study(cfg, output_dir="/nonexistent/study-check", repo_root=repo_root)
    seen, todo = set(), []
    if not cfg.base.given:
        todo.append(("base", None, "base.pretrain.overrides / recipe_overrides"))
    for run in cfg.grid:  # every run's config: alpha meets rules between fields (window_bos needs 0); a seed enters none
        if (run.method, run.variant, run.alpha) not in seen:
            seen.add((run.method, run.variant, run.alpha))
            todo.append((run.key, run, f"finetune.overrides / methods.{run.method}"
                                       + (f" / variants.{run.variant}" if run.variant else "")))
    for key, run, source in todo:
        try:
            study.recipe_fields(key, run)
        except (KeyError, ValueError, TypeError) as e:
            raise ValueError(f"the recipe config of run {key} (from recipe_config, {source}) is refused by the "
                             f"recipe: {e}") from None
