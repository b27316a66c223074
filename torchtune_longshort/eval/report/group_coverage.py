"""How much of a group an lm-eval group score covers: lm-eval averages a group metric over the subtasks that report
it, so a group whose datasets are partly missing (LongBench-E without some files, BABILong with some QA tasks not
generated) scores what is there. The report and the study mark such a value ``0.41 (7/13 tasks)``."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Dict, List, Optional

from torchtune_longshort.eval.report.run_files import json_file, lm_eval_files
from torchtune_longshort.eval.tasks import current_name
from torchtune_longshort.eval.tasks.common.unavailable import MISSING_METRIC


def load_group_subtasks(results_dir: Path) -> Dict[str, List[str]]:
    """``{group: [direct subtasks]}`` from lm-eval's ``group_subtasks`` in every results file (newest wins)."""
    out: Dict[str, List[str]] = {}
    for f in lm_eval_files(results_dir):
        for group, members in (json_file(f).get("group_subtasks") or {}).items():
            out[current_name(group)] = [current_name(m) for m in members]
    return out


def finite_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def group_coverage(results: Dict[str, Dict[str, Any]], group_subtasks: Dict[str, List[str]]) -> Dict[str, Any]:
    """How many leaf tasks each group score averages: ``{group: {metric: {"present", "missing", "total"}}}``.

    lm-eval averages a group metric over the subtasks that report it, so a group whose datasets are partly missing
    (LongBench-E without some files, BABILong with some QA tasks not generated) scores what is there; ``present``
    and ``missing`` name the leaf tasks (nested groups flattened) that did and did not report ``metric``.
    """

    def leaves(group: str, seen=()) -> List[str]:
        out: List[str] = []
        for t in group_subtasks.get(group, []):
            out += leaves(t, seen + (group,)) if t in group_subtasks and t not in seen else [t]
        return out

    cov: Dict[str, Any] = {}
    for group in group_subtasks:
        if group not in results:
            continue
        tasks = leaves(group)
        for metric, value in results[group].items():
            if metric == MISSING_METRIC or not finite_number(value):
                continue
            present = [t for t in tasks if finite_number(results.get(t, {}).get(metric))]
            cov.setdefault(group, {})[metric] = {"present": present, "missing": [t for t in tasks if t not in present],
                                                 "total": len(tasks)}
    return cov


def coverage_note(cov: Optional[Dict[str, Any]]) -> str:
    """`` (k/n tasks)`` when a group score averages fewer than all of its tasks, else ``""``."""
    if not cov or not cov["missing"]:
        return ""
    return f" ({len(cov['present'])}/{cov['total']} tasks)"
