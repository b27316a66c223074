"""The study's tables as data, one owner for the report and the figures: per table (perplexity, misalignment, passkey,
BABILong, LongBench-E), per method, one row per loss (the CE baseline, then each alpha; the base as a reference)
and one cell per length, with the mean ± sd over seeds, every run's value and the JSON key it was read from.

:func:`build_tables` computes them from the run records (:func:`load_records`: the ``result.json`` of the base and of
every grid run); :mod:`~torchtune_longshort.study.report` writes them as Markdown and ``summary.json``, and
:mod:`~torchtune_longshort.study.figures` draws them (also when it redraws a finished report from the records it
holds).
"""

from __future__ import annotations

import json
from collections import Counter
import math
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Tuple

from torchtune_longshort.eval.tasks import TASK_FAMILIES, task_results
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.plots.axes import table_number
from torchtune_longshort.refusals import one_line
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.eval_config import BabilongConfig, metric_of
from torchtune_longshort.study.labels import loss_label
from torchtune_longshort.study.records import metric_stderr, metric_value, not_scored_reasons, upgraded, why_empty
from torchtune_longshort.study.run_configs import run_folder
from torchtune_longshort.study.runner import RESULT

# table id (a study family: config.metric_of names its task and per-length metric) -> (title, lengths field,
# lower is better)
_PPL, _MIS, _PASSKEY = (TASK_FAMILIES[f].task for f in ("ppl", "misalignment", "passkey"))
TABLES = {
    "ppl": (f"Perplexity ({_PPL}, {{src}} text)", "ppl_lengths", True),
    "misalignment": (f"Misalignment metric, Eq. 4 (SCE; {_MIS} task)", "misalignment_lengths", True),
    "jeffreys": (f"Misalignment metric, Eq. 4, Jeffreys divergence (SCE minus the entropies; {_MIS} task)",
                 "misalignment_lengths", True),
    "passkey": (f"Passkey retrieval accuracy (mean over depths; {_PASSKEY} task)", "passkey_lengths", False),
    "passkey_digits": ("Passkey digits in place (graded retrieval, mean over depths; random digits score 0.1; "
                       f"{_PASSKEY} task)", "passkey_lengths", False),
}


def fmt(x: Optional[float]) -> str:
    """How a number is printed in the tables (:func:`~torchtune_longshort.plots.axes.table_number`: 4 significant
    digits, a large one whole); ``None`` -> an em dash."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "—"
    return table_number(x)


def mean_sd(values: List[float]) -> Tuple[Optional[float], Optional[float]]:
    """Mean and sample standard deviation (n - 1); sd is None for a single value."""
    if not values:
        return None, None
    return statistics.fmean(values), (statistics.stdev(values) if len(values) > 1 else None)


def cell_text(mean: Optional[float], sd: Optional[float]) -> str:
    return fmt(mean) if sd is None else f"{fmt(mean)} ± {fmt(sd)}"


def read_records(cfg: StudyConfig, folder_of: Callable[[str], Path],
                 cut_off: str = "refuse") -> Dict[str, Dict[str, Any]]:
    """``{key: result.json}`` for the base and every grid run, each read from ``folder_of(key)`` (records of earlier
    versions in the current layout); a run with no result.json is ``not run``. A result.json that is not a JSON
    object (cut off by a full disk or a kill): ``cut_off="refuse"`` raises ``ValueError`` naming the file (a
    report's copies, written whole, are never cut off: that report is broken); ``"failed"`` makes it a failed run
    whose error names the file and how to run it again (a study's own runs: the others are reported)."""
    recs: Dict[str, Dict[str, Any]] = {}
    for key in ["base"] + [r.key for r in cfg.grid]:
        p = folder_of(key) / RESULT
        if not p.is_file():
            recs[key] = {"key": key, "status": "not run"}
            continue
        try:
            rec = json.loads(p.read_text())
            what = None if isinstance(rec, dict) else f"a JSON {type(rec).__name__}, not an object"
        except ValueError as e:
            what = one_line(e)
        if what is None:
            recs[key] = upgraded(rec)
        elif cut_off == "failed":
            recs[key] = {"key": key, "status": "failed", "stage": "record", "run_dir": str(p.parent),
                         "error": f"{p} is not a whole run record ({what}): cut off (a full disk, a kill?); the "
                                  "study command without --report-only runs it again"}
        else:
            raise ValueError(f"{p} is not a whole run record ({what}): it was cut off (a full disk, a kill?); "
                             "run the command that wrote it again")
    return recs


def load_records(out: Path, cfg: StudyConfig) -> Dict[str, Dict[str, Any]]:
    """:func:`read_records` of a study's output folder ``out`` (its run folders: :func:`run_folder`); a record cut
    off is a failed run (the study reruns it), not the end of the report."""
    return read_records(cfg, lambda key: run_folder(Path(out), key), cut_off="failed")


def qa_label(qa: str) -> str:
    """``"qa1,qa2,qa3,qa4,qa5"`` -> ``"QA1-QA5"``; ``"qa1"`` -> ``"QA1"``; ``"qa1,qa3"`` -> ``"QA1, QA3"``."""
    nums = [int(q.strip()[2:]) for q in qa.split(",") if q.strip()]
    if len(nums) > 2 and nums == list(range(nums[0], nums[-1] + 1)):
        return f"QA{nums[0]}-QA{nums[-1]}"
    return ", ".join(f"QA{n}" for n in nums)


def _babilong_note(bab: BabilongConfig, recs: Dict[str, Dict[str, Any]]) -> str:
    depths = f", fact depths {bab.depths} %" if bab.depths else ""
    group = TASK_FAMILIES["babilong"].task
    scored = sorted({t[len(group) + 1:] for r in recs.values() for t in (r.get("group_subtasks") or {}).get(group, [])
                     if t.startswith(group + "_")})  # the QA tasks the runs' group score was taken over
    text = (f"Data: BABILong-style samples generated here by `torchtune_longshort.eval.tasks.babilong.generator` "
            f"(tasks {qa_label(bab.qa)}, lengths {', '.join(bab.lengths)}, {bab.n} per task and length{depths}, "
            f"haystack {bab.haystack_name}), not the official BABILong data: these numbers are not comparable with "
            "published BABILong results. ")
    if scored and set(scored) != set(bab.tasks_asked):  # runs of a version that ran the whole group
        return text + (f"These runs scored the group `{group}` over {qa_label(','.join(scored))}, whose tasks not "
                       f"asked had no data; a cell marked (k/{len(scored)} tasks) averages the k tasks that had data.")
    return text + (f"A cell is the mean over the tasks asked ({qa_label(bab.qa)}) of each task's accuracy; one marked "
                   f"(k/{len(bab.tasks_asked)} tasks) averages the k of them that had data.")


def _coverage_text(recs: Dict[str, Dict[str, Any]], runs: List[str], task: str,
                   metric: str) -> Tuple[str, Optional[Dict]]:
    """`` (k/n tasks)`` when the cell's runs scored a group over fewer tasks than it has, and what was missing."""
    covs = [task_results(recs[k].get("coverage") or {}, task).get(metric) for k in runs]
    covs = [c for c in covs if c]
    partial = [c for c in covs if c["missing"]]
    if not partial:
        return "", None
    ks = sorted({len(c["present"]) for c in covs})
    k = str(ks[0]) if len(ks) == 1 else f"{ks[0]}-{ks[-1]}"
    info = {"present": sorted({t for c in covs for t in c["present"]}),
            "missing": sorted({t for c in partial for t in c["missing"]}), "total": partial[0]["total"]}
    return f" ({k}/{info['total']} tasks)", info


def table_cell(recs: Dict[str, Dict[str, Any]], members: List[str], task: str, metric: str, reasons: List[str],
          label: str) -> Dict[str, Any]:
    """One cell over the runs ``members``: mean ± sd of the successful runs' values; "—" when no run succeeded;
    "n/a (note k)" when runs succeeded but the task could not run there (a length the model does not cover, data
    not generated), its reasons appended to the table's ``reasons`` and cited by number. A cell without a value
    says why in ``why_empty`` (:func:`~torchtune_longshort.study.records.why_empty`: not run, failed, or the
    reason for its length), which the figures write on their empty panels."""
    ok = [k for k in members if recs.get(k, {}).get("status") == "ok"]
    vals = {k: metric_value(recs[k], task, metric) for k in ok}
    vals = {k: v for k, v in vals.items() if v is not None and math.isfinite(v)}
    m, s = mean_sd(list(vals.values()))
    mark, cov = _coverage_text(recs, list(vals), task, metric)
    ses = {k: se for k in vals if (se := metric_stderr(recs[k], task, metric)) is not None}
    cell = {"mean": m, "sd": s, "n": len(vals), "values": vals, "json_key": f"results.{task}.{metric}",
            "text": cell_text(m, s) + (f" (se {fmt(ses[next(iter(vals))])})" if len(vals) == 1 and ses else "")
            + mark}
    if ses:  # lm-eval's standard error of each run's value (over its samples; the ± is over seeds)
        cell["stderr"] = ses
    if cov:
        cell["partial_group"] = cov
    if not vals:
        cell["why_empty"] = why_empty(recs, members, task, label)
    blank = [k for k in ok if k not in vals]
    parts = []  # why the cell holds fewer values than its row has runs
    if blank:
        why = list(dict.fromkeys(r for k in blank for r in not_scored_reasons(recs[k], task))) or ["no value reported"]
        for r in why:
            if r not in reasons:
                reasons.append(r)
        parts.append("note " + ", ".join(str(reasons.index(r) + 1) for r in why))
        cell["not_scored"] = {"runs": blank, "reasons": why}
        if not vals:
            cell["text"] = f"n/a ({parts[0]})"
    lost = Counter((recs.get(k) or {}).get("status") or "not run" for k in members if k not in ok)
    if vals and (blank or lost):  # a failed or unrun seed is left out of the mean: say so, never silently
        parts += [", ".join(f"{c} {status}" for status, c in sorted(lost.items()))] if lost else []
        cell["text"] = f"{cell['text']} ({len(vals)}/{len(members)} runs; {'; '.join(parts)})"
    return cell


def build_tables(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """Every table as data: per (table, method) rows of cells with mean, sd, per-run values and sources."""
    out: Dict[str, Any] = {}
    ev = cfg.eval
    specs: Dict[str, Tuple[str, str, List[Tuple[str, str, str]], bool]] = {}
    notes: Dict[str, str] = {}
    for tid, (title, field, lower) in TABLES.items():
        cols = [(length_label(n), *metric_of(tid, n)) for n in getattr(ev, field)]
        specs[tid] = (title.format(src=ev.ppl_source), tid, cols, lower)
    bab = ev.babilong
    if ev.babilong_lengths:
        cols = [(lab, *metric_of("babilong", lab)) for lab in bab.lengths] + [("all", TASK_FAMILIES["babilong"].task,
                                                                                 "acc")]
        specs["babilong"] = (f"BABILong {qa_label(bab.qa)} accuracy (official scoring, generated data)", "babilong",
                             cols, False)
        notes["babilong"] = _babilong_note(bab, recs)
    lb, lbe = ev.longbench_e_data_dir, TASK_FAMILIES["longbench_e"].task
    if lb and any(task_results(r.get("results") or {}, lbe) for r in recs.values()):
        keys = sorted({m for r in recs.values() for m in task_results(r.get("results") or {}, lbe)
                       if m.startswith("score")})
        specs["longbench_e"] = (f"LongBench-E ({lbe})", "longbench_e", [(k, lbe, k) for k in keys], False)
        notes["longbench_e"] = ("The group holds 13 datasets; a cell marked (k/13 tasks) averages the k datasets "
                                "whose data files were present.")
    for tid, (title, _prefix, cols, lower) in specs.items():
        per_method, reasons = {}, []  # reasons: the table's notes, numbered from 1 in the cells that cite them
        for mname in cfg.methods:
            rows = []
            for a in cfg.alphas:
                members = [r.key for r in cfg.runs_of(mname, a)]
                ok = [k for k in members if recs[k].get("status") == "ok"]
                cells = {col: table_cell(recs, members, task, metric, reasons, col) for col, task, metric in cols}
                rows.append({"label": loss_label(a), "alpha": a, "runs": members, "ok_runs": ok, "cells": cells})
            if ev.eval_base:
                ok = ["base"] if recs.get("base", {}).get("status") == "ok" else []
                cells = {col: table_cell(recs, ["base"], task, metric, reasons, col) for col, task, metric in cols}
                rows.append({"label": "reference: base model (L0, no RoPE scaling, extrapolating)", "alpha": None,
                             "runs": ["base"], "ok_runs": ok, "cells": cells})
            per_method[mname] = rows
        partial = sorted({t for rows in per_method.values() for row in rows for c in row["cells"].values()
                          for t in (c.get("partial_group") or {}).get("missing", [])})
        note = notes.get(tid, "")
        if partial:
            note += (" " if note else "") + f"Partial group scores here: no value from {', '.join(partial)}."
        if reasons:
            note += ((" " if note else "") + "Not scored (the runs succeeded; the task could not run there): "
                     + "; ".join(f"({i}) {r[:400]}" for i, r in enumerate(reasons, 1)))
        out[tid] = {"title": title, "columns": [c[0] for c in cols], "lower_is_better": lower, "methods": per_method,
                    "note": note}
    return out
