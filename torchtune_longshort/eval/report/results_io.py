"""Reading lm-eval runs (an ``--output_path`` folder, or one results file: :mod:`.run_files`; one run each:
:mod:`.one_run`): its metrics, the reasons values are missing, its sample
counts (per task, and per depth x length cell) and ``--limit``, group coverage, provenance and the per-position
loss curves of ``longshort_ppl``.

Task names are read as the pack's current names: a family's former name (``long_ppl`` in results written before the
pack's names took the ``longshort_`` prefix) becomes its current one
(:func:`torchtune_longshort.eval.tasks.current_name`).
"""

from __future__ import annotations

import functools
import json
import logging
import math
import re
from collections import defaultdict
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Tuple

from torchtune_longshort.eval.report.group_coverage import finite_number, load_group_subtasks
from torchtune_longshort.eval.report.one_run import chat_tasks, check_one_run, pack_family, task_settings
from torchtune_longshort.eval.report.run_files import (  # noqa: F401  (re-exported)
    LM_EVAL_FILE,
    json_file,
    lm_eval_files,
    samples_task,
    n_shot,
    results_files,
)
from torchtune_longshort.eval.tasks import TASK_FAMILIES, current_name
from torchtune_longshort.eval.tasks.common.lengths import parse_length
from torchtune_longshort.eval.tasks.common.unavailable import (
    ERROR_METRIC, LIMIT_LEFT_OUT_KEY, NOT_SCORED_KEY, NOT_SCORED_LENGTHS_KEY,
)
from torchtune_longshort.plural import counted

logger = logging.getLogger(__name__)


# lm-eval's --predict_only swaps every task's metrics for this one (its value 999 is a placeholder, no score)
PREDICT_ONLY_METRIC = "bypass"


def metric_length(key: str, metric: str) -> Optional[int]:
    """The length of a per-length metric name: ``("ppl_4k", "ppl") -> 4096``; None when ``key`` is not
    ``<metric>_<length label>`` (``"ppl"``, ``"acc_d50"``, ``"acc_4k_d50"``)."""
    prefix = metric + "_"
    return parse_length(key[len(prefix):]) if key.startswith(prefix) else None


# A depth x length cell's metric: ``acc_<length label>_d<depth>`` (passkey, BABILong's fact-depth variant), and
# passkey's ``digits_<length label>_d<depth>`` (the fraction of its digits retrieved).
CELL_METRIC = re.compile(r"^(?P<metric>acc|digits)_(?P<length>\w+?)_d(?P<depth>\d+)$")

def sample_rows(path: Path) -> List[Dict[str, Any]]:
    """The rows of a samples file; a line that is not JSON (torn by a killed run) is skipped with a warning, never
    the whole report. Read once per version of the file (the curves, the cell counts and the cut-off check all ask)."""
    st = Path(path).stat()
    return list(_sample_rows(str(path), st.st_mtime_ns, st.st_size))


@functools.lru_cache(maxsize=8)
def _sample_rows(path: str, _mtime_ns: int, _size: int) -> Tuple[Dict[str, Any], ...]:
    rows, bad = [], []
    for i, line in enumerate(Path(path).read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except ValueError:
            bad.append(i)
            continue
        rows.append(row if isinstance(row, dict) else {})
    if bad:
        logger.warning("%s: %s not JSON (line %d first), skipped", path, counted(len(bad), "line"), bad[0])
    return tuple(rows)


def remove_lm_eval_files(results_dir: Path) -> List[Path]:
    """Delete what lm-eval wrote under ``results_dir`` (its results and samples files, by name) and the folders
    that this leaves empty, ``results_dir`` included; return the files left, which lm-eval did not write (a
    user's), by path. A folder that held none of lm-eval's files stays, empty or not."""
    results_dir = Path(results_dir)
    emptied = set()
    for p in sorted(results_dir.rglob("*")):
        if p.is_file() and not p.is_symlink() and LM_EVAL_FILE.match(p.name):
            p.unlink()
            emptied.update(q for q in [p.parent, *p.parent.parents] if q == results_dir or results_dir in q.parents)
    for d in sorted(emptied, key=lambda q: len(q.parts), reverse=True):  # the deepest first
        if not any(d.iterdir()):
            d.rmdir()
    return sorted(p for p in results_dir.rglob("*") if not p.is_dir()) if results_dir.is_dir() else []


def load_results(results_dir: Path) -> Dict[str, Dict[str, Any]]:
    """``{task: {metric: value}}`` from every results file of ``results_dir`` (newest file wins per task;
    keys drop lm-eval's ``,none`` filter suffix; stderr entries, ``--predict_only``'s placeholder ``bypass`` and the
    reason strings of older files' ``error`` metric are dropped: :func:`load_not_scored` reads the reasons). The
    files must all come from one run (:func:`check_one_run`: same model, model_args and checkpoint), else
    ``ValueError``."""
    files = results_files(results_dir)
    check_one_run(results_dir)
    out: Dict[str, Dict[str, Any]] = {}
    for f in files:  # oldest first, so newer files overwrite
        data = json_file(f)
        for task, metrics in data.get("results", {}).items():
            clean = {}
            for key, value in metrics.items():
                if "," not in key or "_stderr" in key:
                    continue
                name, filt = key.split(",", 1)
                if name not in (ERROR_METRIC, PREDICT_ONLY_METRIC):
                    clean[name if filt == "none" else f"{name},{filt}"] = value
            out[current_name(task)] = clean
    return out


def load_stderrs(results_dir: Path) -> Dict[str, Dict[str, float]]:
    """``{task: {metric: standard error}}``: lm-eval's ``<metric>_stderr,none`` entries of every results file of
    ``results_dir`` (newest file wins per task), the numbers only (lm-eval writes "N/A" where it has none)."""
    out: Dict[str, Dict[str, float]] = {}
    for f in results_files(results_dir):
        for task, metrics in (json_file(f).get("results") or {}).items():
            out[current_name(task)] = {
                key.split(",", 1)[0][: -len("_stderr")]: float(v) for key, v in metrics.items()
                if key.endswith("_stderr,none") and isinstance(v, (int, float)) and not isinstance(v, bool)}
    return out


def not_scored_of(data: Dict[str, Any]) -> Dict[str, str]:
    """``{task: reasons}`` of one parsed results file: why some of a task's values are NaN or missing, from the
    ``not_scored`` entry the pack's tasks write to its ``configs`` block (and the ``error`` metric of older files);
    the distinct reasons joined by `` | ``, each with its sample count when more than one."""
    out: Dict[str, str] = {}
    for task, cfg in (data.get("configs") or {}).items():
        reasons = (cfg or {}).get(NOT_SCORED_KEY) or {}
        out[current_name(task)] = " | ".join(r if n == 1 else f"{r} ({n} samples)" for r, n in reasons.items())
    for task, metrics in (data.get("results") or {}).items():
        legacy = metrics.get(f"{ERROR_METRIC},none")
        if isinstance(legacy, str) and legacy and not out.get(current_name(task)):
            out[current_name(task)] = legacy
    return {t: r for t, r in out.items() if r}


def load_not_scored(results_dir: Path) -> Dict[str, str]:
    """:func:`not_scored_of` over every results file of ``results_dir`` (newest file wins per task)."""
    out: Dict[str, str] = {}
    for f in results_files(results_dir):
        data = json_file(f)
        tasks = set(data.get("configs") or {}) | set(data.get("results") or {})
        for task in tasks:
            out.pop(current_name(task), None)
        out.update(not_scored_of(data))
    return out


def load_limit_left_out(results_dir: Path) -> Dict[str, List[str]]:
    """``{task: cells}``: the length (x depth) cells of each pack task that lm-eval's ``--limit`` left without a
    document (the task's ``limit_left_out``; newest results file wins per task). They have no row, column or
    heatmap cell in the report, and no reason among the unscored values: they were never run."""
    out: Dict[str, List[str]] = {}
    for f in results_files(results_dir):
        for task, cfg in (json_file(f).get("configs") or {}).items():
            out[current_name(task)] = [str(c) for c in (cfg or {}).get(LIMIT_LEFT_OUT_KEY) or []]
    return {t: c for t, c in sorted(out.items()) if c}


def load_not_scored_counts(results_dir: Path) -> Dict[str, Dict[str, Dict[str, int]]]:
    """The counts behind :func:`load_not_scored`'s reasons: ``{task: {"samples": {reason: samples}, "lengths":
    {length label: samples}}}`` from the pack's ``configs`` entries (newest results file wins per task)."""
    out: Dict[str, Dict[str, Dict[str, int]]] = {}
    for f in results_files(results_dir):
        for task, cfg in (json_file(f).get("configs") or {}).items():
            out[current_name(task)] = {k: dict((cfg or {}).get(key) or {}) for k, key in
                                       (("samples", NOT_SCORED_KEY), ("lengths", NOT_SCORED_LENGTHS_KEY))}
    return {t: c for t, c in out.items() if c["samples"] or c["lengths"]}


def predict_only_tasks(results_dir: Path) -> List[str]:
    """The tasks of ``results_dir``'s newest results file that lm-eval ran with ``--predict_only``: it swaps each
    task's metrics for ``bypass`` (their ``configs`` block lists that one metric), so the run has outputs in its
    samples files and no scores."""
    files = results_files(results_dir)
    return predict_only_of(json_file(files[-1])) if files else []


def predict_only_of(data: Dict[str, Any]) -> List[str]:
    """:func:`predict_only_tasks` of one parsed results file."""
    configs = data.get("configs") or {}
    metrics = {t: [m.get("metric") for m in (c or {}).get("metric_list") or [] if isinstance(m, dict)]
               for t, c in configs.items()}
    return sorted(current_name(t) for t, m in metrics.items() if m == [PREDICT_ONLY_METRIC])


def _evaluated(docs: int, limit: Any) -> int:
    """How many of ``docs`` lm-eval evaluates under ``--limit`` (an int, or a fraction below 1)."""
    if limit is None:
        return docs
    limit = float(limit)
    return min(docs, math.ceil(docs * limit) if limit < 1.0 else int(limit))


def ran_on(device: Optional[str], env_info: Any) -> Optional[str]:
    """The device a run ran on: lm-eval's ``config.device``, unless that names CUDA while the run's own environment
    (lm-eval's ``pretty_env_info``, torch's ``collect_env``) says CUDA was not available: stock ``lm_eval`` records its
    ``--device`` default, ``cuda:0``, and the ``hf`` model then runs on the CPU."""
    if device and str(device).startswith("cuda") and "Is CUDA available: False" in str(env_info or ""):
        return f"cpu (recorded as {device}; CUDA was not available)"
    return device


def lm_eval_limit(limit: Any) -> Any:
    """``--limit`` as lm-eval reads it: a value below 1 a fraction of each task's documents (``0.3``), any other
    a count (``1.0`` is 1 document: returned as ``1``); None: every document."""
    if isinstance(limit, float) and limit >= 1.0 and limit.is_integer():
        return int(limit)
    return limit


def load_run_info(results_dir: Path) -> Dict[str, Any]:
    """What a report says about one run, from its results files (the newest wins): the lm-eval ``model``, the
    checkpoint (``pretrained``) and its fingerprint, its other model_args (``model_settings``: ``rope=yarn``, ...),
    the weights' ``dtype`` (lm-eval's ``model_dtype``, both models
    record it), the ``device``, ``--limit`` (None: every sample; :func:`lm_eval_limit`), each task's n-shot, the tasks
    a chat template was applied to (those that ignore it left out), the number of samples
    each task evaluated: its documents (``n-samples`` ``original``, placeholder rows included) cut to ``--limit``
    as lm-eval cuts them (lm-eval's ``effective`` counts one metric's items: one length of a length-swept task), and
    the tasks none of whose samples was scored (``unscored``: each counted in ``not_scored``, e.g. the misalignment
    task under ``hf``, whose one placeholder row stands for the whole task, or a task without data), the
    ``--gen_kwargs`` it ran with (``gen_kwargs``), each task's version (``task_versions``) and the settings of the
    pack's tasks that change what they measure (``task_settings``; :func:`one_run.task_settings`), and the lines that
    said a stdlib source held text the checkpoint's run trained on (``trained_text_overlap``)."""
    files = results_files(results_dir)
    ident = check_one_run(results_dir)
    samples: Dict[str, int] = {}
    shots: Dict[str, Any] = {}
    limit, dtype, device, chat, gen_kwargs = None, None, None, set(), {}
    versions: Dict[str, Any] = {}
    measured: Dict[str, Dict[str, Any]] = {}
    latest: Dict[str, Tuple[Dict[str, Any], List[str]]] = {}
    overlap: List[str] = []
    for f in files:
        data = json_file(f)
        config = data.get("config") or {}
        lines = config.get("trained_text_overlap")
        overlap += [x for x in lines if isinstance(x, str) and x not in overlap] if isinstance(lines, list) else []
        gen_kwargs = config.get("gen_kwargs") if isinstance(config.get("gen_kwargs"), dict) else gen_kwargs
        limit = lm_eval_limit(config.get("limit", limit))
        dtype = config.get("model_dtype") or dtype
        device = ran_on(config.get("device"), data.get("pretty_env_info")) or device
        chat |= {current_name(t) for t in chat_tasks(data)}
        shots.update({current_name(t): n for t, n in n_shot(data).items()})
        ran = task_settings(data)
        versions.update(ran["version"])
        measured.update(ran["settings"])
        for task, n in (data.get("n-samples") or {}).items():
            if isinstance(n, dict) and isinstance(n.get("original"), int):
                samples[current_name(task)] = _evaluated(n["original"], limit)
                latest[current_name(task)] = (n, list((data.get("results") or {}).get(task) or {}))
    subsets = {} if limit is not None else samples_subsets(results_dir, latest)
    samples.update({t: s["evaluated"] for t, s in subsets.items()})
    counts = load_not_scored_counts(results_dir)
    unscored = sorted(t for t, n in samples.items() if n and sum(counts.get(t, {}).get("samples", {}).values()) >= n)
    shown = {k: v for k, v in (ident.get("model_args") or {}).items() if k not in ("pretrained", "dtype")}
    # the folder longshort-eval resolved (absolute) where recorded: a report on another cwd still finds it
    pretrained = ident.get("checkpoint_dir") or (ident.get("model_args") or {}).get("pretrained")
    return {"model": ident.get("model"), "pretrained": pretrained,
            "model_settings": shown,
            "checkpoint_fingerprint": ident.get("checkpoint_fingerprint"), "limit": limit, "samples": samples,
            "unscored": unscored,
            "dtype": str(dtype).replace("torch.", "") if dtype else None, "device": device, "n_shot": shots,
            "chat_template": sorted(chat), "subset": subsets, "gen_kwargs": gen_kwargs,
            "task_versions": versions, "task_settings": measured, "trained_text_overlap": overlap}


def samples_subsets(results_dir: Path, latest: Mapping[str, Tuple[Dict[str, Any], List[str]]]) -> Dict[str, Any]:
    """The pack's tasks a run without ``--limit`` evaluated on part of their documents (lm-eval's ``--samples
    '{"task": [ids]}'``, which it records nowhere): ``{task: {"evaluated", "of", "exact"}}``. ``latest``: each task's
    ``n-samples`` and metric keys. lm-eval's ``effective`` counts the items of the task's fullest metric: all of
    its documents (passkey's ``acc``) or those of one length (ppl's ``ppl_<L>``), so a whole evaluation has
    ``effective x lengths >= original`` (a length that could not run keeps one row); fewer is a subset, of at most
    that many documents, or exactly the distinct ``doc_id`` of its samples file when there is one."""
    files = {samples_task(f): f for f in lm_eval_files(results_dir, "samples")}  # the newest per task
    out: Dict[str, Any] = {}
    for task, (n, keys) in latest.items():
        fam = pack_family(task)
        if fam is None or not isinstance(n.get("effective"), int) or n["effective"] < 1:  # < 1: --predict_only
            continue
        names = [k.split(",")[0] for k in keys]
        lengths = {metric_length(k, m) for k in names for m in fam.metrics} - {None}
        bound = n["effective"] * max(1, len(lengths))
        ids = {r.get("doc_id") for r in sample_rows(files[task])} - {None} if task in files else set()
        if bound < n["original"] and len(ids) < n["original"]:
            out[task] = {"evaluated": len(ids) if ids else bound, "of": n["original"], "exact": bool(ids)}
    return out


def cut_off_samples(results_dir: Path, evaluated: Mapping[str, int]) -> List[str]:
    """The newest samples file of each task that holds fewer readable rows than the task evaluated (``evaluated``:
    :func:`load_run_info`'s ``samples``), as ``"<file> (<rows> of <n> samples)"``: a kill or a full disk cut it off
    (mid-line: a line that is not JSON; at a line's end: fewer lines). The curves and cell counts use its readable
    rows; the report says which files those are."""
    newest: Dict[str, Path] = {}
    for f in lm_eval_files(results_dir, "samples"):
        newest[samples_task(f)] = f
    out = []
    for task, f in sorted(newest.items()):
        want = evaluated.get(current_name(task))
        rows = len(sample_rows(f))
        if want is not None and rows < want:
            out.append(f"{f} ({rows} of {want} samples)")
    return out


def load_provenance(results_dir: Path) -> Optional[Dict[str, Any]]:
    """The provenance block in the newest results file that has one: ``longshort-eval`` records it for every model
    (:mod:`torchtune_longshort.eval.run_record`); None: stock lm-eval wrote them all."""
    for f in reversed(lm_eval_files(results_dir)):
        prov = (json_file(f).get("config") or {}).get("provenance")
        if isinstance(prov, dict):
            return prov
    return None


def load_curves(results_dir: Path) -> Dict[int, List[float]]:
    """Per-position mean NLL per ``longshort_ppl`` length (``curve_mean_nll_<length>`` of each logged sample) from
    lm-eval samples files; a length found in several files is taken from the newest. Empty for a model that returns
    no per-token log-probabilities (lm-eval's ``hf``): its samples have no such key."""
    # deferred: lm_eval (the ppl task's module builds on lm-eval's Task; reading results files needs none of it)
    from torchtune_longshort.eval.tasks.ppl.task import position_curve

    curves: Dict[int, List[float]] = {}
    for f in (f for f in lm_eval_files(results_dir, "samples") if samples_task(f) == TASK_FAMILIES["ppl"].task):
        per_length: Dict[int, List[Any]] = defaultdict(list)
        for row in sample_rows(f):
            for key, value in row.items():
                length = metric_length(key, "curve_mean_nll")
                if length is not None:
                    per_length[length].append(value)
        for length, per_doc in per_length.items():
            curve = position_curve(per_doc)
            if curve:
                curves[length] = curve
    return curves


def load_cell_counts(results_dir: Path) -> Dict[str, Dict[Tuple[str, int], int]]:
    """``{task: {(length label, depth): n}}``: how many samples each depth x length cell of a task averages (the
    ``acc_<length>_d<depth>`` metrics of the report's heatmaps), counted from lm-eval's samples files
    (``--log_samples``): each row holds the metrics of its own cell, a finite value when it was scored; the newest
    file of a task wins, and a group's cell sums its members'. Empty without samples files."""
    newest: Dict[str, Path] = {}
    for f in lm_eval_files(results_dir, "samples"):
        newest[samples_task(f)] = f
    counts: Dict[str, Dict[Tuple[str, int], int]] = {}
    for task, f in newest.items():
        cells: Dict[Tuple[str, int], int] = defaultdict(int)
        for row in sample_rows(f):
            scored = {(m["length"], int(m["depth"])) for key, v in row.items() if (m := CELL_METRIC.match(key))
                      and parse_length(m["length"]) is not None and finite_number(v)}
            for cell in scored:  # a row's cell once, however many of its metrics it scored (passkey's acc, digits)
                cells[cell] += 1
        if cells:
            counts[task] = dict(cells)
    groups = load_group_subtasks(results_dir)

    def total(task: str, seen=()) -> Dict[Tuple[str, int], int]:
        if task in counts or task not in groups or task in seen:
            return counts.get(task, {})
        out: Dict[Tuple[str, int], int] = defaultdict(int)
        for member in groups[task]:
            for cell, n in total(member, seen + (task,)).items():
                out[cell] += n
        return dict(out)

    return {t: c for t in {*counts, *groups} if (c := total(t))}


def even_cell_counts(total: Optional[int], limit: Any, cells: List[Tuple[str, int]]) -> Dict[Tuple[str, int], int]:
    """n per depth x length cell of a task run without ``--limit`` whose ``total`` samples (lm-eval's
    ``n-samples``) divide evenly over its ``cells``: the pack's swept tasks make the same number of samples for each
    length and depth (a length they could not run adds one placeholder row, which breaks the division). Empty when
    that does not hold: then n is not known without the samples files (:func:`load_cell_counts`)."""
    if limit is not None or not total or not cells or total % len(cells):
        return {}
    return {cell: total // len(cells) for cell in cells}
