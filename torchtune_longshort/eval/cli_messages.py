"""What ``longshort-eval`` says besides lm-eval's own output: its ``--help`` preamble (our model, its arguments,
``tasks-path``), the "did you mean" of a task name lm-eval does not know (and a ``--tasks`` list read as lm-eval
would misread it, :func:`tidy_task_lists`), and the closing summary line that counts the metrics left unscored and
gives their reasons.
"""

from __future__ import annotations

import difflib
import math
import re
import textwrap
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

from torchtune_longshort.eval.cli_argv import prog, stock_lm_eval
from torchtune_longshort.eval.model import args as model_args
from torchtune_longshort.eval.report.results_io import PREDICT_ONLY_METRIC as BYPASS, not_scored_of, predict_only_of
from torchtune_longshort.eval.tasks.common.unavailable import LIMIT_LEFT_OUT_KEY, MISSING_METRIC
from torchtune_longshort.plural import counted

_MISSING = re.compile(r"^Tasks not found: (.+)$")


def help_preamble() -> str:
    """The lines ``longshort-eval --help`` prints above lm-eval's own help. Nothing is indented to the command's
    name, which is as long as it was typed (``python -m torchtune_longshort.eval``): the first paragraph is wrapped
    with it, and each addition's description goes on its own lines under the command."""
    args = model_args.__doc__.split("\n\n", 1)[1].rstrip()
    me = prog()
    intro = textwrap.fill(f"{me}: lm-eval's CLI with this package's model `longshort` registered and its task pack "
                          "(longshort_*) included. Everything below is lm-eval's; the additions:", width=100)
    return (
        f"{intro}\n\n"
        f"  {me} run --model longshort --model_args pretrained=DIR[,key=value...] --tasks longshort_ppl ...\n"
        f"  {me} tasks-path\n"
        "      print the task pack's folder, for stock lm-eval:\n"
        f"      {stock_lm_eval()}\n"
        f"  {me} peft-base STEP --out DIR\n"
        "      write the base folder a LoRA run's STEP/adapter goes on under stock lm-eval\n"
        "      (--model hf --model_args pretrained=DIR,peft=STEP/adapter)\n\n"
        "--model_args of the `longshort` model (a torchtune model read from a Hugging Face checkpoint folder):\n"
        f"{args}\n\n"
        "A --device this machine does not have is refused before anything runs (any model); the run ends with one\n"
        "line counting the metrics left unscored (NaN) and why.\n"
        + "-" * 100
    )


def tidy_task_lists(argv: Sequence[str]) -> List[str]:
    """``argv`` with the spaces around each name of a ``--tasks`` list dropped (``"longshort_ppl, longshort_passkey"``:
    lm-eval looked for a task named `` longshort_passkey`` and suggested the name itself)."""
    def tidy(value: str) -> str:
        return ",".join(n.strip() for n in value.split(",") if n.strip())

    out: List[str] = []
    in_list = False
    for a in argv:
        if in_list and not a.startswith("-"):
            if tidy(a):  # a value that was only spaces and commas names nothing
                out.append(tidy(a))
            continue
        out.append("--tasks=" + tidy(a[len("--tasks="):]) if a.startswith("--tasks=") else a)
        in_list = a in ("--tasks", "-t")
    return out


def tasks_not_found(message: str, known: Iterable[str]) -> str:
    """lm-eval's ``Tasks not found: a, b`` as one refusal line with the nearest known names ("" when ``message`` is
    another error)."""
    m = _MISSING.match(str(message).strip())
    if not m:
        return ""
    known = sorted(set(known))
    parts = []
    for name in [t.strip() for t in m.group(1).split(",") if t.strip()]:
        close = difflib.get_close_matches(name, known, n=3, cutoff=0.6)
        parts.append(f"{name!r}" + (f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""))
    return (f"--tasks: no task {', '.join(parts)}; `{prog()} ls tasks` lists them (the pack's start with "
            "longshort_)")


def _metrics(results: Dict[str, Any]):
    """``(task, metric, value)`` of every metric value lm-eval reports (its filter suffix dropped; stderr entries,
    names, aliases and sample counts skipped)."""
    for task, metrics in (results.get("results") or {}).items():
        for key, value in metrics.items():
            if "," not in key or "_stderr" in key or isinstance(value, str):
                continue
            if key.split(",", 1)[0] == BYPASS:  # --predict_only's stand-in (999): no score
                continue
            yield task, key.split(",", 1)[0], value


def _group_reason(members: Optional[List[str]], reasons: Dict[str, str]) -> str:
    """Why a group's metric is unscored: a group records no reason of its own, it averages its members'."""
    if not members:
        return "no reason recorded"
    told = [m for m in members if reasons.get(m)]
    if not told:
        return "no reason recorded"
    more = f"; and {len(told) - 2} more" if len(told) > 2 else ""
    return "a group, from its members: " + "; ".join(f"{m}: {reasons[m]}" for m in told[:2]) + more


def summary_line(results: Dict[str, Any], results_file: Optional[Path] = None) -> str:
    """``[longshort-eval] N metrics scored, M unscored: task: metric, ... (reasons); ...``: the run's closing line,
    ending ``; results: <results_file>`` when lm-eval wrote one (in ``<output_path>/<its sanitized model name>/``,
    which for ``pretrained=./out/step_8`` is the hidden ``.__out__step_8``)."""
    line = _scored_line(results)
    return line if results_file is None else f"{line}; results: {results_file}"


def _scored_line(results: Dict[str, Any]) -> str:
    """:func:`summary_line` without the results file."""
    bad: Dict[str, List[str]] = {}
    scored, missing, some = 0, [], set()
    groups = results.get("group_subtasks") or {}
    for task, name, value in _metrics(results):
        if name == MISSING_METRIC:  # a group member without data: its marker, not a score
            if value and task not in groups:  # a group's is its members' mean: they are named, each with its reason
                missing.append(task)
        elif isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
            scored += 1
            some.add(task)
        else:
            bad.setdefault(task, []).append(name)
    for task in missing:  # one of BABILong's lengths not there, the others scored: not "every metric"
        bad.setdefault(task, []).append("part of its data (no data)" if task in some else "every metric (no data)")
    n_bad = sum(len(v) for v in bad.values())
    left = {t: c[LIMIT_LEFT_OUT_KEY] for t, c in sorted((results.get("configs") or {}).items())
            if (c or {}).get(LIMIT_LEFT_OUT_KEY)}
    tail = ("; --limit left without a document: " + "; ".join(f"{t}: {', '.join(c)}" for t, c in left.items())
            if left else "")
    bypass = any(BYPASS + "," in k for m in (results.get("results") or {}).values() for k in m)
    if not scored and not n_bad and (bypass or predict_only_of(results)):  # metrics swapped for lm-eval's bypass
        return f"[{prog()}] --predict_only: the outputs are written, no metric scored"
    if not n_bad:
        return f"[{prog()}] {counted(scored, 'metric')} scored, none unscored{tail}"
    reasons = not_scored_of(results)
    members = results.get("group_subtasks") or {}

    def why(task: str) -> str:
        if reasons.get(task):
            return _short(reasons[task])
        if any(m in bad for m in members.get(task) or ()):  # its members say why, each once, beside it
            return "a group: the reasons are its members'"
        return _short(_group_reason(members.get(task), reasons))

    parts = [f"{task}: {', '.join(sorted(metrics))} ({why(task)})" for task, metrics in sorted(bad.items())]
    return f"[{prog()}] {counted(scored, 'metric')} scored, {n_bad} unscored: " + "; ".join(parts) + tail


def _short(reason: str, most: int = 240) -> str:
    """A reason cut to ``most`` characters for the closing line (the results file keeps it whole)."""
    return reason if len(reason) <= most else reason[: most - 1] + "…"
