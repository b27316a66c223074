"""The files of one run: lm-eval's results and samples files under an ``--output_path`` folder, or one results file.

lm-eval 0.4.13 writes a run in one of two forms. ``--output_path <folder>``: ``<folder>/<model>/results_<date>.json``
and ``samples_<task>_<date>.jsonl`` beside it. ``--output_path <name>.json``: ``<name>_<date>.json`` and the
samples files in the folder of ``<name>.json``. A run given to the report is either a folder (every results file under
it, any depth: ``results_<date>.json`` by name, ``<name>_<date>.json`` by content, lm-eval's keys) or one results
file (its samples files: those beside it with the same ``<date>``, which lm-eval gives a run's files), or the
``<name>.json`` given to ``--output_path`` itself (every ``<name>_<date>.json`` beside it, as a folder's files).
"""

from __future__ import annotations

import functools
import json
import re
from pathlib import Path
from typing import Any, Dict, List, Optional

from torchtune_longshort.eval.tasks import current_name

# lm-eval's file names: ``results_<date>.json`` and ``samples_<task>_<date>.jsonl``, the date as its
# ``EvaluationTracker`` writes it (``datetime.now().isoformat()`` with ":" made "-")
_LM_EVAL_DATE = r"\d{4}-\d{2}-\d{2}T\d{2}-\d{2}-\d{2}(?:\.\d+)?"
LM_EVAL_FILE = re.compile(rf"^(?:results_{_LM_EVAL_DATE}\.json|samples_.+_{_LM_EVAL_DATE}\.jsonl)$")
# a results file of either form (``results_<date>.json``, ``<name>_<date>.json``), its date as group "date"
DATED_RESULTS = re.compile(rf"^(?P<stem>.+)_(?P<date>{_LM_EVAL_DATE})\.json$")
_SAMPLES_DATE = re.compile(rf"_(?P<date>{_LM_EVAL_DATE})\.jsonl$")

# Top-level keys of every results file lm-eval writes (``EvaluationTracker.save_results_aggregated``): a
# ``<name>_<date>.json`` with ``results`` and one of these is lm-eval's
_RESULTS_KEYS = ("configs", "versions", "n-samples", "n-shot", "config", "lm_eval_version")

NO_RESULTS = ("lm-eval writes results_<date>.json under an --output_path folder, or <name>_<date>.json (and its "
              "samples_*.jsonl) beside an --output_path <name>.json")


def json_file(path: Path) -> Any:
    """A results file parsed; one that is not JSON is refused naming it (the report cannot stand without it): cut off
    as stock lm-eval, which writes it in place, leaves it when killed. The report reads every results file of a run,
    so a run evaluated again into the same ``--output_path`` is refused as long as the cut-off file lies beside it."""
    try:
        return json.loads(Path(path).read_text())
    except ValueError as e:
        raise ValueError(f"{path}: not a JSON file ({e}), a results file cut off while it was written; move or delete "
                         f"it (a run evaluated again beside it is refused while it is there), or evaluate the run "
                         f"again into another --output_path folder") from None


def is_results_file(path: Path) -> bool:
    """Whether ``path`` is one of lm-eval's results files: named ``results_<date>.json``, or named
    ``<name>_<date>.json`` (``--output_path <name>.json``) and holding lm-eval's keys (``results`` and one of
    ``configs``, ``versions``, ``n-samples``, ``config``, ...); a user's ``notes_<date>.json`` is not."""
    path = Path(path)
    if LM_EVAL_FILE.match(path.name) and path.name.startswith("results_"):
        return True
    if not DATED_RESULTS.match(path.name) or not path.is_file():
        return False
    st = path.stat()
    return _has_results_keys(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=64)
def _has_results_keys(path: str, _mtime_ns: int, _size: int) -> bool:
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, ValueError, UnicodeDecodeError):
        return False
    return isinstance(data, dict) and isinstance(data.get("results"), dict) and any(k in data for k in _RESULTS_KEYS)


def _date(name: str) -> Optional[str]:
    m = DATED_RESULTS.match(name) or _SAMPLES_DATE.search(name)
    return m["date"] if m else None


def lm_eval_files(run: Path, kind: str = "results") -> List[Path]:
    """lm-eval's results files (``kind="results"``) or ``samples_<task>_<date>.jsonl`` (``"samples"``) of a run,
    oldest first by the date in their names (``lm_eval.utils.get_file_datetime``). ``run``: a folder (its files at
    any depth) or one results file (itself; its samples: those beside it with its date). Matched by file name (a
    ``<name>_<date>.json`` also by content): lm-eval's ``get_results_filenames`` tests paths for ``/results_``,
    which takes a samples file in a folder named ``results_*`` and misses ``results_<date>.json`` at the top of a
    relative listing."""
    from lm_eval.utils import get_file_datetime

    run = Path(run)
    if _named_output(run):  # ``--output_path <name>.json`` as given: every ``<name>_<date>.json`` beside it
        files = [p for p in run.parent.glob("*_*.json")
                 if (m := DATED_RESULTS.match(p.name)) and m["stem"] == run.stem and is_results_file(p)]
        if kind != "results":
            dates = {_date(p.name) for p in files}
            files = [p for p in run.parent.glob("samples_*.jsonl") if LM_EVAL_FILE.match(p.name)
                     and _date(p.name) in dates]
    elif run.is_file():
        date = _date(run.name)
        files = [run] if kind == "results" else [p for p in run.parent.glob("samples_*.jsonl")
                                                 if LM_EVAL_FILE.match(p.name) and date and _date(p.name) == date]
    elif kind == "results":
        files = [p for p in run.rglob("*.json") if is_results_file(p)]  # not a user's results_notes.json
    else:
        files = [p for p in run.rglob("samples_*.jsonl") if LM_EVAL_FILE.match(p.name)]
    return sorted(files, key=lambda p: (get_file_datetime(p.name), p.name))


def _named_output(run: Path) -> bool:
    """Whether ``run`` is an ``--output_path <name>.json`` as the user gave it to lm-eval, which wrote no file of
    that name but ``<name>_<date>.json`` beside it (the report is given the path the evaluation was)."""
    return run.suffix == ".json" and not run.exists() and run.parent.is_dir()


def samples_task(path: Path) -> str:
    """The task of a ``samples_<task>_<date>.jsonl`` file (``lm_eval.utils.get_file_task_name``), by its current
    name."""
    from lm_eval.utils import get_file_task_name

    return current_name(get_file_task_name(Path(path).name))


def samples_of(output_path: Path, task: str) -> List[Dict[str, Any]]:
    """Rows of the newest ``samples_<task>_<date>.jsonl`` lm-eval wrote for ``--output_path output_path``
    (``--log_samples``; a folder, or lm-eval's ``<name>.json`` file form: :func:`lm_eval_files`)."""
    files = [p for p in lm_eval_files(Path(output_path), "samples") if samples_task(p) == task]
    if not files:
        raise FileNotFoundError(f"lm-eval wrote no samples_{task}_<date>.jsonl for --output_path {output_path}")
    return [json.loads(x) for x in files[-1].read_text().splitlines() if x.strip()]


def results_files(run: Path) -> List[Path]:
    """:func:`lm_eval_files` of a run, refused (``FileNotFoundError`` / ``ValueError``) when there is none, saying
    which forms the report reads."""
    run = Path(run)
    if _named_output(run) and not lm_eval_files(run):
        raise FileNotFoundError(f"results_dir={str(run)!r}: no {run.stem}_<date>.json results file beside it (lm-eval "
                                f"writes one for --output_path {run.name}): name the --output_path of an lm-eval run, "
                                "or one of its results files")
    if not run.exists() and not _named_output(run):
        raise FileNotFoundError(f"results_dir={str(run)!r} does not exist, so it holds no lm-eval results file: name "
                                "the --output_path folder of an lm-eval run, or one of its results files")
    if run.is_file() and not is_results_file(run):
        raise ValueError(f"results_dir={str(run)!r} is a file but not an lm-eval results file (no 'results' and "
                         f"'configs' / 'config' keys): name the --output_path folder of an lm-eval run, or one of its "
                         f"results files ({NO_RESULTS})")
    files = lm_eval_files(run)
    if not files:
        raise FileNotFoundError(f"results_dir={str(run)!r} holds no lm-eval results file: {NO_RESULTS}")
    return files


def check_scored(run: Path) -> None:
    """Refuse (``ValueError``, one line naming the files) a run none of whose results files holds a task with a
    value (a ``<metric>,<filter>`` key under ``results``: lm-eval's ``{}`` of a run stopped before it wrote any, a
    file that is no JSON object): the report of it was empty, exit 0."""
    files = results_files(run)
    if any(_has_a_task(json_file(f)) for f in files):
        return
    named = ", ".join(str(f) for f in files[:3]) + (f" and {len(files) - 3} more" if len(files) > 3 else "")
    raise ValueError(f"results_dir={str(run)!r}: {named} hold{'s' if len(files) == 1 else ''} no task with a value "
                     "(lm-eval writes them under 'results', e.g. {\"results\": {\"longshort_ppl\": {\"ppl_4k,none\": "
                     "...}}}): nothing to report; name the --output_path of a run that scored a task, or leave it out")


def _has_a_task(data: Any) -> bool:
    results = data.get("results") if isinstance(data, dict) else None
    return isinstance(results, dict) and any(isinstance(m, dict) and any("," in str(k) for k in m)
                                             for m in results.values())


def run_label(run: Path) -> str:
    """A run's default name in the report: its folder's name; for a results file, its ``<name>`` of
    ``<name>_<date>.json`` (its folder's name for lm-eval's ``results_<date>.json``)."""
    run = Path(run)
    if _named_output(run):
        return run.stem
    m = DATED_RESULTS.match(run.name) if run.is_file() else None
    if not m:
        return run.name
    return run.parent.resolve().name if m["stem"] == "results" else m["stem"]


def n_shot(data: Dict[str, Any]) -> Dict[str, Any]:
    """``{task: n}`` of one parsed results file (lm-eval's ``n-shot``)."""
    shots = data.get("n-shot") or {}
    return dict(shots) if isinstance(shots, dict) else {}


def limit_text(limit: Any) -> str:
    """``--limit`` as lm-eval reads it: ``all`` (none), a count (``1``, never ``1.0``: lm-eval evaluates 1
    document) or a fraction of each task's documents (``0.3 (fraction)``: below 1)."""
    if limit is None:
        return "all"
    if isinstance(limit, (int, float)) and not isinstance(limit, bool):
        return f"{limit:g} (fraction)" if limit < 1 else str(int(limit)) if float(limit).is_integer() else str(limit)
    return str(limit)
