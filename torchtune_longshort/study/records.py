"""Reading a study run's result.json: a task's metric, a score family at a length, why a task has no value in it, and
the mean of a per-position loss curve."""

from __future__ import annotations

import math
import statistics
from typing import Any, Dict, List, Optional

from torchtune_longshort.eval.tasks import TASK_FAMILIES, current_name, family_of, task_results
from torchtune_longshort.study.eval_config import metric_of


def value(rec: Dict[str, Any], family: str, n: Any) -> Optional[float]:
    """``family`` (ppl, misalignment, jeffreys, entropy, passkey, babilong) at length ``n`` from a result.json.

    ``entropy`` is the mean next-token entropy ``(H(p) + H(q)) / 2`` of the misalignment task's two windows, from
    its SCE and Jeffreys values: ``SCE = H(p, q) + H(q, p)`` and ``Jeffreys = SCE - H(p) - H(q)``."""
    if family == "entropy":
        sce, jef = value(rec, "misalignment", n), value(rec, "jeffreys", n)
        return None if sce is None or jef is None else (sce - jef) / 2
    task, metric = metric_of(family, n)
    v = task_results(rec.get("results") or {}, task).get(metric)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        return None
    return float(v)


def metric_value(rec: Dict[str, Any], task: str, metric: str):
    """``metric`` of ``task`` in a run's result.json (under the task's former name in older records); None when
    absent or not a number."""
    v = task_results(rec.get("results") or {}, task).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def curve_mean(rec: Dict[str, Any], length: int, lo: int, hi: int) -> Optional[float]:
    """Mean per-position NLL over positions ``[lo, hi)`` of the ``length``-token perplexity curve."""
    c = (rec.get("curves") or {}).get(str(length)) or (rec.get("curves") or {}).get(length)
    if not c or hi > len(c) or lo >= hi:
        return None
    return statistics.fmean(c[lo:hi])


def _members(rec: Dict[str, Any], task: str) -> List[str]:
    """The tasks under group ``task`` in a run's record (nested groups flattened): its ``group_subtasks``, or in
    records written before they were kept, the record's tasks named after the same family (``babilong_qa1``)."""
    groups = {current_name(g): [current_name(m) for m in ms] for g, ms in (rec.get("group_subtasks") or {}).items()}
    if groups:
        out, todo = [], list(groups.get(current_name(task), []))
        while todo:
            t = todo.pop(0)
            out.append(t)
            todo += [m for m in groups.get(t, []) if m not in out]
        return out
    fam = family_of(task)
    stem = TASK_FAMILIES[fam].folder.split("_")[0] if fam else None
    return [t for t in (rec.get("results") or {}) if stem and stem in t and current_name(t) != current_name(task)]


def not_scored_reasons(rec: Dict[str, Any], task: str) -> List[str]:
    """Why ``task`` (and, for a group, its members) has no value in a run's record, distinct reasons in order: the
    record's ``not_scored`` (the results file's reasons, kept by the runner) or, in records written before it, the
    ``error`` entries of its results."""
    names = {current_name(t) for t in (task, *_members(rec, task))}
    found = {current_name(t): r for t, r in (rec.get("not_scored") or {}).items()}
    for t, metrics in (rec.get("results") or {}).items():
        if isinstance(metrics, dict) and isinstance(metrics.get("error"), str):
            found.setdefault(current_name(t), metrics["error"])
    reasons = [r for t in sorted(names) for r in str(found.get(t) or "").split(" | ") if r]
    return list(dict.fromkeys(reasons))
