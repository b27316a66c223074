"""The report's runs: the runs table (model, checkpoint, dtype, device, ``--limit``, samples per task), the refusal of
runs whose numbers are not comparable (dtype, ``--limit``, sample counts), and why a run has no per-position loss
curve."""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from torchtune_longshort.eval.report.results_io import lm_eval_files, metric_length, samples_task
from torchtune_longshort.eval.report.run_files import limit_text

# why the hf model loads another dtype than longshort: said only when runs differ in dtype
DTYPE_HINT = ("lm-eval's hf model loads a folder in its config's torch_dtype unless --model_args dtype=float32 is "
              "given; the longshort model runs float32 unless --model_args dtype= says otherwise")


def _unequal_samples(names: Sequence[str], infos: Dict[str, Dict[str, Any]]) -> str:
    """The tasks the runs scored on different numbers of samples, each with its counts, as text ("" when none).
    Every model counts the same samples for one evaluation (a sample it cannot run is still a sample: NaN, with its
    reason; :func:`~torchtune_longshort.eval.tasks.common.pack_task.sweep_dataset`), so a difference means the runs
    did not evaluate the same samples (another ``--limit``, other data, other lengths). A run that scored none of
    a task's samples (``unscored``: a model that cannot run it, no data) is left out of that task's comparison: its
    count is of placeholder rows, and its values are reported as not scored, with the reason."""
    counts = {t: {r: infos[r]["samples"][t] for r in names
                  if t in infos[r]["samples"] and t not in infos[r].get("unscored", ())}
              for t in sorted({t for i in infos.values() for t in i["samples"]})}
    return "; ".join(f"{t}: " + ", ".join(f"`{r}` {n}" for r, n in c.items())
                     for t, c in counts.items() if len(set(c.values())) > 1)


def _mixed_settings(names: Sequence[str], infos: Dict[str, Dict[str, Any]]) -> Tuple[str, Dict[str, set]]:
    """``(text, {run: settings it differs in})``: the settings under which runs' numbers are not comparable (the
    weights' dtype, ``--limit``, a ``--samples`` subset, the n-shot and chat template of a task both ran, the version
    and the measured settings of a task all ran: :func:`_measured_differences`) where the runs differ ("" when they
    agree)."""
    parts, marks = [], {r: set() for r in names}
    common = set.intersection(*(set(infos[r].get("samples") or ()) for r in names)) if names else set()
    for key, label in (("dtype", "dtype"), ("limit", "--limit"), ("subset", "--samples"), ("n_shot", "n-shot"),
                       ("chat_template", "--apply_chat_template")):
        values = {r: setting(_on_tasks(infos[r].get(key), common), key) for r in names}
        if len(set(values.values())) > 1:
            parts.append(f"{label} (" + ", ".join(f"`{r}` {v}" for r, v in values.items()) + ")")
            for r in names:
                marks[r].add(key)
    for label, values in _measured_differences(names, infos):
        parts.append(f"{label} (" + ", ".join(f"`{r}` {v}" for r, v in values.items()) + ")")
        for r in names:
            marks[r].add("task_settings")
    return " and ".join(parts), marks


def _measured_differences(names: Sequence[str], infos: Dict[str, Dict[str, Any]]) -> List[Tuple[str, Dict[str, str]]]:
    """``[(what, {run: value})]``: the version of a task every run scored (lm-eval's ``versions``), and each setting
    of a family of the pack every run scored that changes what it measures (its ``--metadata`` prompt, data,
    haystack, ...: :attr:`~torchtune_longshort.eval.tasks.TaskFamily.measured_by`), where the runs differ in it."""
    out = []
    for field, label in (("task_versions", "{task} version"), ("task_settings", "{task}'s {key}")):
        per_run = [infos[r].get(field) or {} for r in names]
        for task in sorted(set.intersection(*(set(p) for p in per_run)) if per_run else ()):
            keyed = {None: {r: p[task] for r, p in zip(names, per_run)}} if field == "task_versions" else {
                key: {r: p[task].get(key) for r, p in zip(names, per_run)} for key in per_run[0][task]}
            for key, values in keyed.items():
                shown = {r: _UNSET if v is None else str(v) for r, v in values.items()}
                if len(set(shown.values())) > 1:
                    out.append((label.format(task=task, key=key), shown))
    return out


# a measured setting a run left to the task's own default
_UNSET = "(the task's default)"


def _on_tasks(value: Any, tasks: set) -> Any:
    """A per-task setting (n-shot ``{task: n}``, the chat template's task list) on ``tasks`` only (the runs' common
    tasks: a task one run lacks is no difference in how they ran); another setting as it is."""
    if isinstance(value, dict) and all(isinstance(v, int) for v in value.values()):
        return {t: n for t, n in value.items() if t in tasks and n}
    if isinstance(value, list):
        return [t for t in value if t in tasks]
    return value


def setting(value: Any, key: str) -> str:
    """A run's setting as the runs table prints it; ``--limit`` as lm-eval reads it (:func:`run_files.limit_text`)."""
    if key == "limit":
        return limit_text(value)
    if key == "n_shot":
        return ", ".join(f"{t} {n}-shot" for t, n in sorted((value or {}).items())) or "0-shot"
    if key == "chat_template":
        return f"on ({', '.join(value)})" if value else "off"
    if key == "subset":  # results_io.samples_subsets
        return "; ".join(f"{t} {_count(c)}" for t, c in sorted(value.items())) if value else "all documents"
    return "?" if value is None else str(value)


def _count(subset: Dict[str, Any]) -> str:
    return f"{'' if subset['exact'] else '<= '}{subset['evaluated']} of {subset['of']} documents"


def _samples_cell(info: Dict[str, Any]) -> str:
    subsets = info.get("subset") or {}
    unscored = set(info.get("unscored", ()))
    return ", ".join(f"{t}: {_count(subsets[t]) + ' (--samples)' if t in subsets else n}"
                     f"{' (none scored)' if t in unscored else ''}"
                     for t, n in sorted(info["samples"].items())) or "—"


def runs_section(names: Sequence[str], dirs: Sequence[Path], infos: Dict[str, Dict[str, Any]],
                 allow_mixed: bool) -> Tuple[str, List[str]]:
    """The runs table (model, checkpoint, dtype, device, --limit, samples per task) and the notes on what the runs
    share or not; ``ValueError`` when runs differ in dtype or ``--limit``, or scored a task on different numbers of
    samples, and ``allow_mixed`` is false (then they are reported with the differences marked ``†``)."""
    mixed, marks = _mixed_settings(names, infos)
    if mixed and not allow_mixed:
        hint = f" ({DTYPE_HINT})" if any("dtype" in m for m in marks.values()) else ""
        raise ValueError(f"the runs differ in {mixed}: their numbers are not comparable{hint}. Evaluate "
                         "them alike, or pass --allow-mixed to report them side by side, marked")
    rows = []
    for name, d in zip(names, dirs):
        info = infos[name]
        samples = _samples_cell(info)
        cell = {k: setting(info[k], k) + (" †" if k in marks[name] else "") for k in ("dtype", "limit")}
        settings = ", ".join(f"{k}={v}" for k, v in (info.get("model_settings") or {}).items())
        model = f"{info['model'] or '?'}{f' ({settings})' if settings else ''}"  # a RoPE override: another model
        rows.append(f"| `{name}` | {d} | {model} | {info['pretrained'] or '?'} | {cell['dtype']} | "
                    f"{info['device'] or '?'} | {cell['limit']} | {samples} |")
    table = ("| run | folder | model | checkpoint | dtype | device | --limit | samples per task |\n"
             "|---|---|---|---|---|---|---|---|\n" + "\n".join(rows))
    notes = [f"**† Mixed settings** (reported side by side anyway, --allow-mixed): the runs differ in {mixed}; "
             "their values are not comparable as they stand."] if mixed else []
    refused = _unequal_samples(names, infos)
    if refused and not allow_mixed:
        raise ValueError(f"the runs scored tasks on different numbers of samples ({refused}): their values are not "
                         "comparable (a --limit run against a full one? other data or lengths?). Evaluate them alike, "
                         "or pass --allow-mixed to report them side by side with this note")
    if refused:
        notes.append(f"**Unequal sample counts** (compared anyway, --allow-mixed): {refused}.")
    notes += [same_checkpoint_note(same, infos) for same in same_checkpoint(names, infos) if len(same) > 1]
    return table, notes


def same_checkpoint_note(runs: List[str], infos: Dict[str, Dict[str, Any]]) -> str:
    """The note naming ``runs`` (one :func:`same_checkpoint` group) as one checkpoint: its content when every run
    recorded the fingerprint (``longshort-eval`` does for any model), else the folder, naming the runs without one."""
    head = f"Runs {', '.join(f'`{n}`' for n in runs)} evaluate the same checkpoint"
    unknown = [n for n in runs if not infos[n].get("checkpoint_fingerprint")]
    if not unknown:
        return f"{head}: one folder, one content (fingerprint {infos[runs[0]]['checkpoint_fingerprint']})."
    return (f"{head} folder; {', '.join(f'`{n}`' for n in unknown)} recorded no content fingerprint (stock lm-eval's "
            "results), so whether the folder held the same weights then is not known.")


def same_checkpoint(names: List[str], infos: Dict[str, Dict[str, Any]]) -> List[List[str]]:
    """The runs of ``names`` grouped by the checkpoint they evaluate: one folder (``pretrained``, relative and
    absolute spellings of a folder here as one), split by content fingerprint where runs recorded different ones
    (the folder rewritten between them; ``longshort-eval`` records one for any model, stock lm-eval none: a run
    without one joins the folder's group when the others agree)."""
    by_path: Dict[str, List[str]] = {}
    for name in names:
        pretrained = infos[name]["pretrained"]
        if pretrained:
            here = Path(pretrained).expanduser()
            by_path.setdefault(str(here.resolve()) if here.exists() else os.path.normpath(pretrained), []).append(name)
    groups = []
    for runs in by_path.values():
        prints = sorted({infos[n]["checkpoint_fingerprint"] for n in runs} - {None})
        groups += [runs] if len(prints) <= 1 else [[n for n in runs if infos[n]["checkpoint_fingerprint"] == f]
                                                   for f in prints]
    return groups


def no_curve_note(run: str, ppl: Dict[str, Any], info: Dict[str, Any], folder: Path, task: str) -> str:
    """Why run ``run``, which has perplexity (``ppl``: its ``task`` metrics), has no per-position loss curve: no
    samples file of ``task`` (evaluated without ``--log_samples``), a model that returns one sum per request, or
    per-token values the task left out (a few-shot context or chat template: the scored tokens are not the
    sequence's)."""
    head = f"No per-position loss curve for `{run}`: "
    per_token = any(metric_length(k, "curve_mean_nll") is not None for k in ppl)
    has_samples = any(samples_task(f) == task for f in lm_eval_files(folder, "samples"))
    model = info.get("model")
    if model not in (None, "longshort") and not per_token:
        why = (f"its model (`{model}`) returns one sum per request, no per-token log-probabilities (the longshort "
               "model returns them; with --log_samples they make the curve)")
        return head + why + ("." if has_samples else "; its run also has no samples file (--log_samples).")
    if not has_samples:
        return head + (f"its run has no `{task}` samples file: evaluate it with --log_samples, which writes the "
                       "per-token values the curve is made of") + ("" if per_token or model else
                                                                   " (and with the longshort model: lm-eval's hf "
                                                                   "returns one sum per request)") + "."
    if not per_token:
        shots = info.get("n_shot", {}).get(task) or 0
        cause = [f"it ran {shots}-shot"] * bool(shots) \
            + ["with a chat template"] * (task in (info.get("chat_template") or ()))
        return head + (f"its samples hold no per-token values: the task leaves them out when the tokens scored "
                       f"are not the sequence's own ({' and '.join(cause) or 'another context before each sequence'}"
                       "; evaluate it 0-shot without a chat template for the curve).")
    return head + "its samples' per-token values are incomplete (a cut-off or NaN sample at every length)."


def finite(values) -> bool:
    """Whether any of ``values`` is a finite number."""
    return any(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in values)
