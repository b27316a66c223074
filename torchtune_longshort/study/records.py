"""Reading a study run's result.json: a task's metric, a score family at a length, why a task has no value in it (and
why a figure's cell is empty, in a few words), the mean of a per-position loss curve, and records of earlier versions
in the current layout."""

from __future__ import annotations

import math
import re
import statistics
from typing import Any, Dict, List, Optional

from torchtune_longshort.eval.tasks import TASK_FAMILIES, current_name, family_of, task_results
from torchtune_longshort.eval.tasks.common.lengths import parse_length, per_depth, per_length
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


def value_stderr(rec: Dict[str, Any], family: str, n: Any) -> Optional[float]:
    """lm-eval's standard error of :func:`value`'s ``family`` at length ``n`` (:func:`metric_stderr`); None when the
    record has none for it (not recorded, "N/A" from lm-eval, not finite) and for ``entropy``, which is derived from
    SCE and Jeffreys, whose errors are correlated (over the same samples)."""
    if family == "entropy":
        return None
    se = metric_stderr(rec, *metric_of(family, n))
    return se if se is not None and math.isfinite(se) else None


def metric_value(rec: Dict[str, Any], task: str, metric: str):
    """``metric`` of ``task`` in a run's result.json (under the task's former name in older records); None when
    absent or not a number."""
    v = task_results(rec.get("results") or {}, task).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def metric_stderr(rec: Dict[str, Any], task: str, metric: str) -> Optional[float]:
    """lm-eval's standard error of ``metric`` of ``task`` in a run's result.json (its ``stderr`` block; for the
    BABILong group of a QA subset, combined as lm-eval combines a group's: ``run_stages.babilong_group``); None when
    absent (records written before it was kept, a metric lm-eval gives none)."""
    v = task_results(rec.get("stderr") or {}, task).get(metric)
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


# The per-length task names of result.json files written before each family swept its lengths inside one task
# (``long_ppl_128: {ppl}``, ``misalignment_256: {sce}``, ``passkey_512: {acc, acc_depth_50}``): stem -> family.
_PER_LENGTH_STEMS = {"long_ppl": "ppl", "misalignment": "misalignment", "passkey": "passkey",
                     "longshort_passkey": "passkey"}
_PER_LENGTH_TASK = re.compile(r"^(?P<stem>[a-z_]+?)_(?P<length>\d+k?)$")
_OLD_DEPTH = re.compile(r"^(?P<metric>\w+?)_depth_(?P<depth>\d+)$")


def upgraded(rec: Dict[str, Any]) -> Dict[str, Any]:
    """``rec`` (a run's result.json) with the per-length tasks of records written by earlier versions
    (``long_ppl_128: {ppl: v}``, ``passkey_512: {acc_depth_50: v}``) moved into their family's task under per-length
    metric names (``longshort_ppl: {ppl_128: v}``, ``longshort_passkey: {acc_512_d50: v}``), so that one reader
    serves old and new records; a record without such tasks is returned as is (a new dict, ``rec`` unchanged).
    The per-position curves and the held-out CE pairs, where JSON's ``null`` stands for a number that was not
    finite (``output_guard.strict_json``), are read back with NaN there, as they were measured."""
    rec = _nan_for_null(rec)
    results = rec.get("results")
    if not isinstance(results, dict):
        return rec
    out: Dict[str, Any] = {}
    for task, metrics in results.items():
        m = _PER_LENGTH_TASK.match(task)
        family = _PER_LENGTH_STEMS.get(m["stem"]) if m else None
        if family is None or not isinstance(metrics, dict) or parse_length(m["length"]) is None:
            out.setdefault(task, {}).update(metrics if isinstance(metrics, dict) else {})
            continue
        n = parse_length(m["length"])
        moved = out.setdefault(TASK_FAMILIES[family].task, {})
        for metric, v in metrics.items():
            d = _OLD_DEPTH.match(metric)
            moved[per_depth(per_length(d["metric"], n), int(d["depth"])) if d else per_length(metric, n)] = v
    return {**rec, "results": out}


def _nan_for_null(rec: Dict[str, Any]) -> Dict[str, Any]:
    """``rec`` with ``null`` read as NaN in its ``curves`` (length -> per-position NLL) and ``train.val_ce``
    ((step, CE) pairs): the lists whose readers do arithmetic on every entry."""
    def num(v: Any) -> Any:
        return math.nan if v is None else v

    out = dict(rec)
    if isinstance(rec.get("curves"), dict):
        out["curves"] = {n: [num(v) for v in c] if isinstance(c, list) else c for n, c in rec["curves"].items()}
    train = rec.get("train")
    if isinstance(train, dict) and isinstance(train.get("val_ce"), list):
        pairs = train["val_ce"]
        out["train"] = {**train, "val_ce": [[p[0], num(p[1])] if isinstance(p, list) and len(p) == 2 else p
                                            for p in pairs]}
    return out


# A length named in a not-scored reason (``longshort_ppl at length 8k: ...``, ``length 8k: BABILong data ...``).
_REASON_LENGTH = re.compile(r"\blength (\d+k?):")
_TOO_FEW = re.compile(r"only (\d+) of num_samples=(\d+) sequences of length=(\d+) tokens could be cut"
                      r"(?:[^(]*\((?:longest document: (\d+) tokens|(\d+) documents, (\d+) tokens in all"
                      r"|no document of (\d+) characters or more[^)]*)\))?")
_TOO_LONG = re.compile(r"prompt longer than the (\d+) tokens")
_NO_DATA = re.compile(r"(data file not found|no such file|holds no sample|gave no text|no text|not found)", re.I)


def short_reason(reason: str) -> str:
    """A not-scored reason in the few words a figure has room for, its kind first: ``the text could not fill the
    length: ...`` (too few sequences could be cut), ``no data: ...`` (a data file or source missing), ``prompt
    longer than the model takes: ...``, else ``not scored: <the reason's start>``."""
    body = re.sub(r"^\S+?( at length \S+?)?: ", "", reason.strip())
    m = _TOO_FEW.search(body)
    if m:
        doc = (f"; longest document {m[4]} tokens" if m[4] else
               f"; {m[5]} documents, {m[6]} tokens in all" if m[5] else
               f"; no document of {m[7]} characters or more" if m[7] else "")
        return f"the text could not fill the length: {m[1]} of {m[2]} sequences of {m[3]} tokens{doc}"
    m = _TOO_LONG.search(body)
    if m:
        return f"prompt longer than the {m[1]} tokens the model takes"
    m = _NO_DATA.search(body)
    if m:
        found = re.sub(r"/\S*/(\S+/\S+)", r"\1", body.split(" (")[0])  # a path's last two parts are enough
        return f"no data: {found[:90]}"
    return f"not scored: {body[:80]}" + ("..." if len(body) > 80 else "")


def why_empty(recs: Dict[str, Dict[str, Any]], members: List[str], task: str, label: str) -> str:
    """Why the runs ``members`` give no value of ``task`` at length ``label`` (a length label, ``"8k"``), in a few
    words: ``not run`` (no record), ``run failed (<stage>)``, or, for runs that succeeded, the reasons their records
    give for that length (:func:`short_reason`; a reason that names another length is left out), else ``no value
    reported``."""
    statuses = {k: (recs.get(k) or {}).get("status") or "not run" for k in members}
    ok = [k for k, s in statuses.items() if s == "ok"]
    if not ok:
        failed = [k for k, s in statuses.items() if s != "not run"]
        if not failed:
            return "not run"
        stages = sorted({str(recs[k].get("stage") or recs[k].get("status")) for k in failed})
        return f"run failed ({', '.join(stages)})"
    reasons = [r for k in ok for r in not_scored_reasons(recs[k], task)]
    named = [r for r in reasons if _REASON_LENGTH.search(r)]
    mine = [r for r in reasons if label in _REASON_LENGTH.findall(r) or not _REASON_LENGTH.search(r)]
    chosen = mine if mine or not named else []
    return "; ".join(dict.fromkeys(short_reason(r) for r in chosen)) or "no value reported"


def members_scored(rec: Dict[str, Any], task: str, metric: str) -> int:
    """How many member tasks of group ``task`` have a finite ``metric`` in a run's record (a group's value is the
    mean over those); 0 when the record names no members with it."""
    results = rec.get("results") or {}
    vals = [task_results(results, t).get(metric) for t in _members(rec, task)]
    return sum(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in vals)


def eval_setting(rec: Dict[str, Any], key: str, default: Any) -> Any:
    """An evaluation setting (``passkey_num_samples``, ``babilong``) as the run used it, from its record's
    ``spec.eval`` (written when it ran: a config edited since does not change what the run did), else
    ``default``."""
    ev = (rec.get("spec") or {}).get("eval") or {}
    return ev.get(key, default) if isinstance(ev, dict) else default
