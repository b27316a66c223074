"""LongBench-E for lm-eval: all 13 datasets, LongBench's official scoring, per-length-bucket scores.

lm-eval 0.4.13 ships the 13 ``longbench_*_e`` tasks (prompts, generation lengths, HF source
``Xnhyacinth/LongBench``), but its ``longbench_e`` group aggregates only 9 of them, its bucket scorer
``scorer_e`` is never called, and its per-task wrappers differ from LongBench's ``eval.py`` in two places
(see :func:`score_prediction`). The pack's group ``longshort_longbench_e`` (YAMLs next to this module, written by
``python -m torchtune_longshort.eval.tasks.generate``) holds one task per dataset, ``longshort_longbench_<name>_e``,
that starts from lm-eval's shipped task file (generation length) and overrides only what this module
provides:

* :func:`doc_to_text` — LongBench's own prompt (:data:`.official_config.PROMPTS`, its ``config/dataset2prompt.json``;
  the function lives there with LongBench's other tables); six of lm-eval's shipped prompts differ from it in a
  newline or a trailing space.
* :func:`load_longbench_e` — the task's ``custom_dataset``: the Hugging Face source, or a local folder of
  LongBench's own ``<dataset>_e.jsonl`` files (``--metadata '{"longbench_e_data_dir": "/path"}'``).
* :func:`process_results` — LongBench's official per-sample score plus the same score under the key of
  the sample's length bucket (``score_0_4k``, ``score_4_8k``, ``score_8k_plus``); lm-eval averages each
  key over the samples that emit it, which is exactly LongBench-E's bucket mean.

The metric primitives (F1 with LongBench's normalization, Rouge-L, classification, retrieval, count) are
taken from lm-eval's copy of LongBench's ``metrics.py``, loaded by file path (that folder has no
``__init__.py``); only the code edit similarity line selection is re-done, because the copy changed it.
Scores are in [0, 1] (LongBench prints them x100).
"""

from __future__ import annotations

import functools
import json
import importlib.util
import logging
import math
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence

from torchtune_longshort.data.file_kinds import line_of
from torchtune_longshort.eval.model.limits import TRUNCATION_FIELD
from torchtune_longshort.eval.tasks import PREFIX
from torchtune_longshort.eval.tasks.common.lengths import round_robin_order
from torchtune_longshort.eval.tasks.common.unavailable import (
    ERROR_FIELD,
    TaskDataError,
    load_hub_dataset,
    missing_results,
    nan_results,
    placeholder,
    reason_of,
    refusal_of,
)
from torchtune_longshort.eval.tasks.longbench_e.official_config import (
    FIRST_LINE_DATASETS,
    LONGBENCH_E_DATASETS,
    dataset_base_name,
)
# the task YAMLs name LongBench's prompt by this module's path (torchtune_longshort...longbench_e.task.doc_to_text)
from torchtune_longshort.eval.tasks.longbench_e.official_config import doc_to_text  # noqa: F401  (re-exported)

log = logging.getLogger(__name__)

HF_DATASET = "Xnhyacinth/LongBench"
# LongBench's pred.py cuts a prompt longer than the model in the middle (first and last halves): its docs declare
# it, so the ``longshort`` model cuts these prompts that way and refuses (NaN) over-long prompts of other tasks.
TRUNCATION = "middle"

# (key suffix, lower bound inclusive, upper bound exclusive) on the sample's ``length`` field, which
# LongBench counts in words (English). Same thresholds as LongBench eval.py's scorer_e.
LENGTH_BUCKETS = (("0_4k", 0, 4000), ("4_8k", 4000, 8000), ("8k_plus", 8000, math.inf))

REQUIRED_FIELDS = ("context", "answers", "length", "all_classes")
# LongBench's JSONL calls the question/instruction field ``input``; the HF mirror the shipped tasks read,
# and their prompts, call it ``question``. Either is accepted and the other name is filled in.
QUESTION_FIELDS = ("input", "question")
# the fields that are put into the prompt as text
TEXT_FIELDS = ("context",) + QUESTION_FIELDS


@functools.lru_cache(maxsize=1)
def shipped_metrics():
    """lm-eval's copy of LongBench's ``metrics.py`` (``lm_eval/tasks/longbench/metrics.py``), loaded by path.

    It sits in a folder without ``__init__.py`` and imports jieba, fuzzywuzzy and rouge (lm-eval's
    ``longbench`` extra); loading it lazily keeps those imports out of ``import torchtune_longshort``.
    """
    import lm_eval.tasks

    path = Path(lm_eval.tasks.__file__).parent / "longbench" / "metrics.py"
    if not path.is_file():
        raise FileNotFoundError(
            f"lm-eval's LongBench metrics file is missing at {path}; install lm-eval[longbench]==0.4.13"
        )
    spec = importlib.util.spec_from_file_location("lm_eval_longbench_metrics", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_sim_score(prediction: str, ground_truth: str, **_: Any) -> float:
    """LongBench's code edit similarity: fuzzy ratio of the first code line of the prediction to the answer.

    LongBench's ``metrics.py`` strips leading newlines and takes the first line containing no backtick,
    ``#`` or ``//`` (a line of spaces counts). lm-eval's copy instead skips blank lines and does not strip,
    which changes the score when a prediction starts with a whitespace-only line; this follows LongBench.
    """
    chosen = ""
    for line in prediction.lstrip("\n").split("\n"):
        if "`" not in line and "#" not in line and "//" not in line:
            chosen = line
            break
    return shipped_metrics().fuzz.ratio(chosen, ground_truth) / 100


def metric_fn(metric: str) -> Callable[..., float]:
    """The per-(prediction, ground truth) metric function called ``metric`` (see LONGBENCH_E_DATASETS)."""
    if metric == "code_sim":
        return code_sim_score
    m = shipped_metrics()
    table = {
        "qa_f1": m.qa_f1_score,
        "rouge": m.rouge_score,
        "classification": m.classification_score,
        "count": m.count_score,
        "retrieval": m.retrieval_score,
    }
    if metric not in table:
        raise ValueError(f"metric={metric!r} is not a LongBench-E metric; accepted: {sorted(table) + ['code_sim']}")
    return table[metric]



def score_prediction(dataset: str, prediction: str, answers: Sequence[str],
                     all_classes: Optional[Sequence[str]]) -> float:
    """LongBench's official per-sample score (``eval.py``'s scorer body), in [0, 1].

    The prediction is used as generated, except for the few-shot datasets, where LongBench keeps the first
    line after stripping leading newlines. (lm-eval's shipped wrappers strip every prediction and rely on
    ``until: ["\\n"]``, which turns a prediction that starts with a newline into an empty string.)
    The score is the maximum over the ground-truth answers.
    """
    base = dataset_base_name(dataset)
    if base in FIRST_LINE_DATASETS:
        prediction = prediction.lstrip("\n").split("\n")[0]
    fn = metric_fn(LONGBENCH_E_DATASETS[base][1])
    score = 0.0
    for ground_truth in answers:
        score = max(score, float(fn(prediction, ground_truth, all_classes=all_classes)))
    return score



def length_bucket(length: Any) -> str:
    """The bucket name (``0_4k``, ``4_8k``, ``8k_plus``) of a sample's ``length`` field (words)."""
    if isinstance(length, bool) or not isinstance(length, (int, float)) or not length >= 0:
        raise ValueError(f"length={length!r}: a LongBench-E sample's 'length' must be a number >= 0 (words)")
    for name, lo, hi in LENGTH_BUCKETS:
        if lo <= length < hi:
            return name
    raise AssertionError("unreachable: the buckets cover [0, inf)")


def process_results(doc: Mapping[str, Any], results: List[str]) -> Dict[str, float]:
    """lm-eval ``process_results``: ``score`` and ``score_<bucket>`` for one sample.

    Only the sample's own bucket key is emitted, so lm-eval's ``mean`` over that key is the mean over the
    bucket's samples (LongBench-E's ``scorer_e``). A placeholder row (data missing or unreachable) gives
    ``missing_data`` = 1 and no score; a prompt the model refused gives NaN scores; both with the reason
    (metric ``error``).
    """
    if reason_of(doc):
        return missing_results(reason_of(doc))
    if "dataset" not in doc:
        raise ValueError(
            "a LongBench-E sample has no 'dataset' field; load it with "
            "torchtune_longshort.eval.tasks.longbench_e.task.load_longbench_e, which checks and fills it"
        )
    refusal = refusal_of(results[0])
    if refusal:
        return nan_results(refusal, {"score": float("nan"), f"score_{length_bucket(doc['length'])}": float("nan")})
    score = score_prediction(doc["dataset"], results[0], doc["answers"], doc.get("all_classes"))
    return {"score": score, f"score_{length_bucket(doc['length'])}": score}


# A row standing for data that could not be had carries the reason here (the pack's one placeholder field).
MISSING_DATA_FIELD = ERROR_FIELD


def missing_data_placeholder(name: str, message: str):
    """A one-row dataset that stands for data that is missing or unreachable (lm-eval cannot build a task from
    0 rows; :func:`torchtune_longshort.eval.tasks.common.unavailable.placeholder`).

    Its row carries ``message`` under ``MISSING_DATA_FIELD``; :func:`process_results` scores it as the
    metric ``missing_data`` = 1 and no ``score``, so the run finishes, the task reports no score, and the
    results file says why (metric ``error``). lm-eval warns that the group average covers fewer datasets.
    """
    row = {"input": "", "question": "", "context": "", "answers": [""], "length": 0,
           "dataset": name, "all_classes": None, "_id": "missing", TRUNCATION_FIELD: TRUNCATION}
    return placeholder(task_of(name), message, row)


def task_of(name: str) -> str:
    """The pack's task name of LongBench-E dataset ``name`` (``"qasper_e"`` -> ``"longshort_longbench_qasper_e"``)."""
    return f"{PREFIX}longbench_{dataset_base_name(name)}_e"


def load_longbench_e(
    longbench_dataset: Optional[str] = None,
    longbench_e_data_dir: Optional[str] = None,
    longbench_e_hf_path: str = HF_DATASET,
    longbench_e_missing: str = "skip",
    **_metadata: Any,
) -> Dict[str, Any]:
    """lm-eval ``custom_dataset`` for one LongBench-E dataset; returns ``{"test": datasets.Dataset}``.

    Args:
        longbench_dataset: e.g. ``"qasper_e"`` (set per task in the group YAML's ``dataset_kwargs``).
        longbench_e_data_dir: a folder holding LongBench's own ``<dataset>_e.jsonl`` files (as in its
            ``data.zip``); read with ``datasets.load_dataset("json", data_files=...)``. Without it the data
            come from ``longbench_e_hf_path`` (default ``Xnhyacinth/LongBench``, the shipped tasks' source).
        longbench_e_missing: ``"skip"`` (default): a missing or unreadable local file (a line that is not
            JSON or not UTF-8, a field missing or of another kind), or hub data that cannot be fetched (offline,
            unreachable), is logged as an error and the task reports ``missing_data`` = 1 and the
            reason instead of a score (see :func:`missing_data_placeholder`), so the other tasks of the run still
            finish; ``"error"``: raise (``FileNotFoundError`` / ``TaskDataError``).
        _metadata: the rest of lm-eval's ``--metadata`` and ``--model_args`` (ignored).

    Every sample must carry LongBench's fields (input or question, context, answers, length, all_classes); ``dataset``
    is filled in when absent and must match when present. Every doc declares LongBench's middle truncation (field
    ``prompt_truncation``, :data:`TRUNCATION`).
    """
    if not longbench_dataset:
        raise ValueError(
            "longbench_dataset is not set: each LongBench-E task must pass dataset_kwargs: "
            "{longbench_dataset: <name>_e} (see the YAMLs next to torchtune_longshort/eval/tasks/longbench_e/task.py)"
        )
    base = dataset_base_name(longbench_dataset)
    name = f"{base}_e"
    if longbench_e_missing not in ("skip", "error"):
        raise ValueError(f"longbench_e_missing={longbench_e_missing!r}; accepted: 'skip', 'error'")
    try:
        ds, source = _open_longbench_e(name, longbench_e_data_dir, longbench_e_hf_path)
        return {"test": _with_longbench_fields(ds, source, base, name)}
    except (FileNotFoundError, TaskDataError) as err:
        if longbench_e_missing == "error":
            raise
        return {"test": missing_data_placeholder(name, str(err))}


def _open_longbench_e(name: str, data_dir: Optional[str], hf_path: str):
    """``(datasets.Dataset, where it came from)`` for LongBench-E dataset ``name``: ``<data_dir>/<name>.jsonl``
    when ``data_dir`` is set, else the hub. Raises ``FileNotFoundError`` (no local file) or ``TaskDataError``."""
    if data_dir:
        import datasets

        path = Path(data_dir).expanduser() / f"{name}.jsonl"
        if not path.is_file():
            raise FileNotFoundError(
                f"LongBench-E data file for {name} not found: {path} (longbench_e_data_dir="
                f"{data_dir!r}; expected LongBench's own '{name}.jsonl' there)"
            )
        raw = path.read_bytes()
        if not raw.strip():  # datasets raised a bare StopIteration on a 0-byte file
            raise TaskDataError(f"LongBench-E data {path} is empty (no rows); LongBench's files hold one JSON "
                                "object a line: put the data set's rows there or remove the file")
        undecodable = _not_utf8(path, raw)
        if undecodable:  # pyarrow keeps such a string unchecked, and the first read of it ended the whole run
            raise TaskDataError(f"LongBench-E data {undecodable}; LongBench's files are UTF-8 text, one JSON "
                                "object a line: fix or remove that line")
        try:
            return datasets.load_dataset("json", data_files={"test": str(path)}, split="test"), str(path)
        except Exception as err:  # datasets' own error for a line it cannot parse; said with the line instead
            raise TaskDataError(f"LongBench-E data {_unreadable_line(path) or f'{path}: {type(err).__name__}'}; "
                                "LongBench's files hold one JSON object a line") from None
    ds = load_hub_dataset(hf_path, name, split="test", alternative=(
        "for local data pass longbench_e_data_dir=<folder of LongBench's <name>_e.jsonl files> in --metadata"))
    return ds, f"{hf_path}:{name}"


def _not_utf8(path: Path, raw: bytes) -> Optional[str]:
    """Where ``raw`` (the bytes of the JSON-lines file ``path``) is not UTF-8, said as ``<path>:<line>: ...``
    (:func:`~torchtune_longshort.data.file_kinds.line_of`); None if it all is."""
    try:
        raw.decode("utf-8")
        return None
    except UnicodeDecodeError as err:
        line, start = raw.count(b"\n", 0, err.start) + 1, raw.rfind(b"\n", 0, err.start) + 1
        byte = raw[err.start:err.start + 1]
        return f"{line_of(path, line)}: not UTF-8 ({err.reason}: byte {byte!r} at column {err.start - start + 1})"


def _unreadable_line(path: Path) -> Optional[str]:
    """Which line of a JSON-lines file is not a JSON object (or not UTF-8), said as ``<path>:<line>: why``
    (:func:`~torchtune_longshort.data.file_kinds.line_of`); None if all are."""
    with open(path, "rb") as f:
        for i, raw in enumerate(f):
            try:
                row = json.loads(raw.decode("utf-8-sig" if i == 0 else "utf-8")) if raw.strip() else {}
            except (UnicodeDecodeError, json.JSONDecodeError) as err:
                why = err.reason if isinstance(err, UnicodeDecodeError) else err.msg
                return f"{line_of(path, i + 1)}: not a JSON line ({why})"
            if not isinstance(row, dict):
                return f"{line_of(path, i + 1)}: a JSON {type(row).__name__}, not an object"
            wrong = [k for k in TEXT_FIELDS if row.get(k) is not None and not isinstance(row[k], str)]
            if wrong:  # pyarrow refuses a column of strings and numbers with no word of the line
                return f"{line_of(path, i + 1)}: field {wrong[0]!r} is {row[wrong[0]]!r:.60}, not text"
    return None


def _check_text(ds, source: str) -> None:
    """Raise ``TaskDataError`` when a sample's ``context`` or question is no string: a key missing from one line
    or ``null`` (pyarrow fills in null, and the prompt showed it as the word "None"). Names the first sample by
    ``file:line`` for a local file, by its index for hub data, and how many samples are so. An empty or blank
    ``context`` is scored as it is (the question alone), said in one warning naming the first such sample."""
    question = "question" if "question" in ds.column_names else "input"
    bad = [(i, f) for f in ("context", question) for i, v in enumerate(ds[f]) if not isinstance(v, str)]
    if not bad:
        empty = [i for i, v in enumerate(ds["context"]) if not v.strip()]
        if empty:  # was scored without a word
            log.warning("LongBench-E data %s: field 'context' is empty (%d of %d samples): scored on the question "
                        "alone; LongBench's samples each hold the text they ask about", _sample_at(source, empty[0]),
                        len(empty), len(ds))
        return
    i, field = min(bad)
    value = ds[i][field]
    value = "missing or null" if value is None else f"{value!r:.60}"
    count = len({j for j, _ in bad})
    raise TaskDataError(f"LongBench-E data {_sample_at(source, i)}: field {field!r} is {value} ({count} of {len(ds)} "
                        "samples); a sample's input and context must be text (LongBench's format): fix or remove those "
                        "lines")


def _sample_at(source: str, i: int) -> str:
    """Sample ``i`` of ``source``: ``<file>:<line>`` for a local file, ``<source>, sample <i>`` for hub data."""
    if Path(source).is_file():  # datasets skips blank lines: sample i is the i-th line that holds something
        with open(source, "rb") as f:
            return line_of(source, [n for n, line in enumerate(f, 1) if line.strip()][i])
    return f"{source}, sample {i}"


def _with_longbench_fields(ds, source: str, base: str, name: str):
    """``ds`` checked for LongBench's fields and completed: ``question`` / ``input`` from each other, ``dataset``
    (checked against ``base`` when present) and the truncation field; every ``length`` must fall in a bucket."""
    missing = [f for f in REQUIRED_FIELDS if f not in ds.column_names]
    if not any(f in ds.column_names for f in QUESTION_FIELDS):
        missing.append("input (or question)")
    if missing:
        raise TaskDataError(
            f"LongBench-E data {source} lacks field(s) {missing}; a sample needs {list(REQUIRED_FIELDS)} "
            f"(LongBench's own JSONL format); it has {ds.column_names}"
        )
    _check_text(ds, source)
    if "question" not in ds.column_names:
        ds = ds.add_column("question", list(ds["input"]))
    elif "input" not in ds.column_names:
        ds = ds.add_column("input", list(ds["question"]))
    if "dataset" in ds.column_names:
        wrong = sorted({repr(d) for d in ds["dataset"] if not isinstance(d, str) or d.removesuffix("_e") != base})
        if wrong:
            raise TaskDataError(f"LongBench-E data {source}: field 'dataset' is [{', '.join(wrong)}], expected "
                                f"{base!r} or {name!r}")
    else:
        ds = ds.add_column("dataset", [name] * len(ds))
    if TRUNCATION_FIELD not in ds.column_names:
        ds = ds.add_column(TRUNCATION_FIELD, [TRUNCATION] * len(ds))
    for i, answers in enumerate(ds["answers"]):
        if not (isinstance(answers, list) and answers and all(isinstance(a, str) for a in answers)):
            said = "missing or null" if answers is None else repr(answers)
            raise TaskDataError(f"LongBench-E data {_sample_at(source, i)}: field 'answers' is {said}, expected a "
                                "non-empty list of strings (LongBench's format: [\"Paris\"]; a string would be "
                                "scored as one answer per character)")
    buckets = []
    for i, length in enumerate(ds["length"]):
        try:
            buckets.append(length_bucket(length))
        except ValueError as e:
            raise TaskDataError(f"LongBench-E data {_sample_at(source, i)}: {e}") from None
    # the buckets in turn, each bucket's samples in the file's order: lm-eval's --limit N then keeps every bucket
    return ds.select(round_robin_order([(b, None) for b in buckets]))
