"""Checks of single study config values: ``(path, value) -> value``, each raising ``ValueError`` that names the field,
the value and what would be accepted (the recipe's own, :mod:`torchtune_longshort.config.values`,
where they fit). The study sections' :func:`~torchtune_longshort.study.fields.setting` declarations use them."""

from __future__ import annotations

from typing import Any, Dict, List

from torchtune_longshort.eval.tasks import check_metadata_values, unknown_metadata_keys
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError
from torchtune_longshort.eval.tasks.babilong.haystack import DEPTHS, LENGTHS
from torchtune_longshort.eval.tasks.babilong.stories import QA_TASKS
from torchtune_longshort.loss.divergences import DIVERGENCES, divergence_fn, is_divergence
from torchtune_longshort.rope import check_rope_method
from torchtune_longshort.config.unknown_keys import ConfigKeyError
from torchtune_longshort.config.values import length, refuse


def lengths(path: str, value: Any) -> List[int]:
    """A list of token lengths (ints >= 1 or labels: 1k = 1024); empty: the task is not run."""
    if not isinstance(value, (list, tuple)):
        raise refuse(path, value, "a list of token lengths, e.g. [128, 512, 1k]")
    return [length(1)(f"{path}[]", n) for n in value]


def alphas(path: str, value: Any) -> List[float]:
    """The loss weights of the grid, sorted; 0 (the cross-entropy baseline row) must be one of them."""
    if (not isinstance(value, (list, tuple)) or not value
            or any(not isinstance(a, (int, float)) or isinstance(a, bool) or a < 0 for a in value)):
        raise ValueError(f"{path}={value!r} must be a non-empty list of numbers >= 0")
    if 0 not in value:
        raise ValueError(f"{path}={value!r} must include 0 (the cross-entropy baseline row)")
    _distinct(path, value)
    return sorted(float(a) for a in value)


def _distinct(path: str, value: Any) -> None:
    """Each entry once: a repeat named one run twice (with --jobs 2, trained twice at once in one folder)."""
    repeated = sorted({v for v in value if list(value).count(v) > 1})
    if repeated:
        raise ValueError(f"{path}={value!r} repeats {', '.join(map(str, repeated))}: give each once")


def seeds(path: str, value: Any) -> List[int]:
    if not isinstance(value, (list, tuple)) or not value or any(not isinstance(s, int) or isinstance(s, bool)
                                                                  for s in value):
        raise ValueError(f"{path}={value!r} must be a non-empty list of ints")
    _distinct(path, value)
    return list(value)


def recipe_keys(path: str, value: Any) -> Dict[str, Any]:
    """Recipe config keys to values, merged over a recipe config (checked with the recipe's typed config by
    :func:`~torchtune_longshort.study.run_configs.check_recipe_overrides`)."""
    if not isinstance(value, dict):
        raise ValueError(f"{path}={value!r} must map recipe keys to values (e.g. {{clip_rope_separately: true}})")
    return value


def builder_node(path: str, value: Any) -> Dict[str, Any]:
    if not isinstance(value, dict) or "_component_" not in value:
        raise ValueError(f"{path}={value!r} must be a builder node with a _component_ field")
    return value


def rope_method(path: str, value: Any) -> str:
    """A method of :data:`torchtune_longshort.rope.ROPE_METHODS`, checked by the registry's one check (the nearest
    name when it is not)."""
    return check_rope_method(value, path)


def task_metadata(path: str, value: Any) -> Dict[str, Any]:
    """lm-eval ``--metadata`` keys of the pack's tasks: keys a task reads (``TaskFamily.metadata_keys``)."""
    if not isinstance(value, dict):
        raise refuse(path, value, "a mapping of task metadata keys to values")
    bad, why = unknown_metadata_keys(value)
    if bad:
        raise ConfigKeyError(f"unknown config key(s) in {path}: {bad}: {why}")
    try:
        check_metadata_values(value)
    except TaskDataError as e:
        raise ValueError(f"{path}.{e}") from None
    return value


def babilong_lengths(path: str, value: Any) -> List[str]:
    if not isinstance(value, (list, tuple)) or any(lab not in LENGTHS for lab in value):
        raise refuse(path, value, f"a list of BABILong length labels of {list(LENGTHS)}")
    return list(value)


def depths(path: str, value: Any) -> List[int]:
    # the depths the longshort_babilong tasks score (acc_d<depth>): the generator refuses another, the task its rows
    if not isinstance(value, (list, tuple)) or not value or any(
            isinstance(d, bool) or not isinstance(d, int) or d not in DEPTHS for d in value):
        raise refuse(path, value, f"a list of fact depths in percent, each one of {list(DEPTHS)} (the depths the "
                     "BABILong tasks score), or null")
    return list(value)


def qa_tasks(path: str, value: Any) -> str:
    if not isinstance(value, str) or not value or any(q.strip() not in QA_TASKS for q in value.split(",")):
        raise refuse(path, value, f"a comma list of {list(QA_TASKS)}")
    return value


def divergence_tag(name: str) -> str:
    """What a divergence adds to its runs' names (``pi_a0.1_js``) and the report's labels: a shipped name, or a
    dotted path's last part (``my_divs.jeffreys_copy``: ``jeffreys_copy``), as a folder name cannot hold the path."""
    return name.rsplit(".", 1)[-1]


def divergences(path: str, value: Any) -> List[str]:
    """loss.divergence values: shipped names or dotted paths of functions of one's own (as the recipe takes), whose
    run-name tags (:func:`divergence_tag`) differ."""
    if not isinstance(value, (list, tuple)) or not value or any(not is_divergence(d) for d in value):
        bad = next((d for d in value if not is_divergence(d)), None) if isinstance(value, (list, tuple)) else None
        why = ""
        if isinstance(bad, str) and "." in bad:
            try:
                divergence_fn(bad)
            except ValueError as e:
                why = f" ({e})"
        raise refuse(path, value, f"a list of {list(DIVERGENCES)} or dotted paths of functions of your own "
                                  f"(my_divs.my_div){why}")
    _distinct(path, value)
    tags = [divergence_tag(d) for d in value]
    clash = next((d for i, d in enumerate(value) if tags.index(tags[i]) != i), None)
    if clash is not None:
        first = value[tags.index(divergence_tag(clash))]
        raise ValueError(f"{path}: {first!r} and {clash!r} would both name runs '<method>_a<alpha>_"
                         f"{divergence_tag(clash)}' (a dotted path's runs are named by its last part): give one, or "
                         "name the other function otherwise")
    return list(value)


def positive_alphas(path: str, value: Any) -> List[float]:
    if (not isinstance(value, (list, tuple)) or not value
            or any(isinstance(a, bool) or not isinstance(a, (int, float)) or a <= 0 for a in value)):
        raise refuse(path, value, "a non-empty list of numbers > 0")
    return [float(a) for a in value]


def e_ranges(path: str, value: Any) -> List[list]:
    """``[lo, hi]`` pairs of the windows' ``e_range`` grammar (resolved against ``L`` by the study's own check)."""
    if not isinstance(value, (list, tuple)) or not value or any(
            not isinstance(r, (list, tuple)) or len(r) != 2 for r in value):
        raise refuse(path, value, "a list of [lo, hi] e ranges, e.g. [[1, L/4]]")
    return [list(r) for r in value]
