"""Reading lm-eval results folders: one run per folder, its metrics, group coverage, provenance and the
per-position loss curves of ``long_ppl``."""

from __future__ import annotations

import json
import math
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from torchtune_longshort.eval.lengths import parse_length


def metric_length(key: str, metric: str) -> Optional[int]:
    """The length of a per-length metric name: ``("ppl_4k", "ppl") -> 4096``; None when ``key`` is not
    ``<metric>_<length label>`` (``"ppl"``, ``"acc_d50"``, ``"acc_4k_d50"``)."""
    prefix = metric + "_"
    return parse_length(key[len(prefix):]) if key.startswith(prefix) else None


# model_args that change how fast a run goes, not its numbers
_NOT_IDENTITY = frozenset({"batch_size", "max_batch_size", "device", "trust_remote_code", "parallelize"})


def run_identity(data: Dict[str, Any]) -> Dict[str, Any]:
    """What one column of a report stands for, from a ``results_*.json``'s ``config``: the lm-eval model, its
    model_args (``checkpoint_dir`` read as ``pretrained``; batch size and device left out) and, for the
    ``longshort`` model, the checkpoint's content fingerprint (``checkpoint_fingerprint``)."""
    from lm_eval.utils import simple_parse_args_string

    config = data.get("config") or {}
    args = config.get("model_args") or {}
    if isinstance(args, str):
        args = simple_parse_args_string(args)
    args = {k: str(v) for k, v in args.items() if k not in _NOT_IDENTITY}
    if "checkpoint_dir" in args:
        args.setdefault("pretrained", args.pop("checkpoint_dir"))
    if "pretrained" in args:
        args["pretrained"] = args["pretrained"].rstrip("/") or "/"
    ident: Dict[str, Any] = {"model": config.get("model"), "model_args": dict(sorted(args.items()))}
    if config.get("checkpoint_fingerprint"):
        ident["checkpoint_fingerprint"] = config["checkpoint_fingerprint"]
    return ident


def _results_files(results_dir: Path) -> List[Path]:
    files = sorted(Path(results_dir).rglob("results_*.json"), key=lambda p: p.name)
    if not files:
        raise FileNotFoundError(f"results_dir={str(results_dir)!r} holds no lm-eval results_*.json file")
    return files


def check_one_run(results_dir: Path) -> Dict[str, Any]:
    """The :func:`run_identity` shared by every ``results_*.json`` under ``results_dir``; raises ``ValueError``
    naming two files and the differing fields when they come from different checkpoints or model settings
    (checkpoint fingerprints are compared where both files have one: older results files lack it)."""
    first: Optional[Tuple[Path, Dict[str, Any]]] = None
    for f in _results_files(results_dir):
        ident = run_identity(json.loads(f.read_text()))
        if first is None:
            first = (f, ident)
            continue
        f0, a = first
        diff = [f"model: {a['model']!r} vs {ident['model']!r}"] if a["model"] != ident["model"] else []
        keys = sorted(a["model_args"].keys() | ident["model_args"].keys())
        diff += [f"{k}: {a['model_args'].get(k)!r} vs {ident['model_args'].get(k)!r}"
                 for k in keys if a["model_args"].get(k) != ident["model_args"].get(k)]
        fa, fb = a.get("checkpoint_fingerprint"), ident.get("checkpoint_fingerprint")
        if fa and fb and fa != fb:
            diff.append(f"checkpoint content: fingerprint {fa} vs {fb} (the checkpoint folder was rewritten "
                        "between the two evaluations)")
        if diff:
            raise ValueError(
                f"results_dir={str(results_dir)!r} mixes results of different checkpoints / model settings, which "
                f"would be merged into one report column: {'; '.join(diff)} ({f0} and {f}). Give each run its own "
                "--output_path folder, or pass the subfolder of one run (lm-eval writes "
                "<output_path>/<checkpoint path>/results_*.json)"
            )
        if fb and not fa:
            first = (f0, {**a, "checkpoint_fingerprint": fb})
    return first[1] if first else {}


def load_results(results_dir: Path) -> Dict[str, Dict[str, Any]]:
    """``{task: {metric: value}}`` from every ``results_*.json`` under ``results_dir`` (newest file wins per task;
    keys drop lm-eval's ``,none`` filter suffix; stderr entries are dropped). The files must all come from one
    run (:func:`check_one_run`: same model, model_args and checkpoint), else ``ValueError``."""
    files = _results_files(results_dir)
    check_one_run(results_dir)
    out: Dict[str, Dict[str, Any]] = {}
    for f in files:  # oldest first, so newer files overwrite
        data = json.loads(f.read_text())
        for task, metrics in data.get("results", {}).items():
            clean = {}
            for key, value in metrics.items():
                if "," not in key or "_stderr" in key:
                    continue
                name, filt = key.split(",", 1)
                clean[name if filt == "none" else f"{name},{filt}"] = value
            out[task] = clean
    return out


def load_group_subtasks(results_dir: Path) -> Dict[str, List[str]]:
    """``{group: [direct subtasks]}`` from lm-eval's ``group_subtasks`` in every ``results_*.json`` (newest wins)."""
    out: Dict[str, List[str]] = {}
    for f in sorted(Path(results_dir).rglob("results_*.json"), key=lambda p: p.name):
        out.update(json.loads(f.read_text()).get("group_subtasks") or {})
    return out


def _number(v: Any) -> bool:
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
            if metric == "missing_data" or not _number(value):
                continue
            present = [t for t in tasks if _number(results.get(t, {}).get(metric))]
            cov.setdefault(group, {})[metric] = {"present": present, "missing": [t for t in tasks if t not in present],
                                                 "total": len(tasks)}
    return cov


def coverage_note(cov: Optional[Dict[str, Any]]) -> str:
    """`` (k/n tasks)`` when a group score averages fewer than all of its tasks, else ``""``."""
    if not cov or not cov["missing"]:
        return ""
    return f" ({len(cov['present'])}/{cov['total']} tasks)"


def load_provenance(results_dir: Path) -> Optional[Dict[str, Any]]:
    """The provenance block the ``longshort`` model put in the newest ``results_*.json`` (None: another model)."""
    files = sorted(Path(results_dir).rglob("results_*.json"), key=lambda p: p.name)
    for f in reversed(files):
        prov = (json.loads(f.read_text()).get("config") or {}).get("provenance")
        if isinstance(prov, dict):
            return prov
    return None


def load_curves(results_dir: Path) -> Dict[int, List[float]]:
    """Per-position mean NLL per ``long_ppl`` length (``curve_mean_nll_<length>`` of each logged sample) from
    lm-eval samples files; a length found in several files is taken from the newest."""
    from torchtune_longshort.eval.long_ppl import position_curve

    curves: Dict[int, List[float]] = {}
    for f in sorted(Path(results_dir).rglob("samples_long_ppl_*.jsonl"), key=lambda p: p.name):
        per_length: Dict[int, List[Any]] = defaultdict(list)
        for line in f.read_text().splitlines():
            row = json.loads(line) if line.strip() else {}
            for key, value in row.items():
                length = metric_length(key, "curve_mean_nll")
                if length is not None:
                    per_length[length].append(value)
        for length, per_doc in per_length.items():
            curve = position_curve(per_doc)
            if curve:
                curves[length] = curve
    return curves
