"""BABILong QA1-QA5 for lm-eval with the benchmark's official answer comparison and length/depth scores.

lm-eval 0.4.13 ships ``babilong_qa1`` .. ``babilong_qa20`` (prompts with two examples, data from
``RMT-team/babilong-1k-samples``, one length per run via ``--metadata '{"max_seq_lengths": "4k"}'``) but
scores them with a bare substring test (``target in output``), so an answer that names every location
counts as right. The pack's group ``longshort_babilong`` (YAMLs next to this module, written by
``python -m torchtune_longshort.eval.tasks.generate``) holds ``longshort_babilong_qa1`` .. ``_qa5``, which start from
those tasks' files (prompts, two examples) and override:

* ``custom_dataset`` -> :func:`load_babilong`: several lengths in one run (``"0k,1k,4k"``), from the hub
  or from a local folder (``<dir>/<length>/<qa>.jsonl``, e.g. the output of
  :mod:`torchtune_longshort.eval.tasks.babilong.generator`, or a snapshot of the hub's own Parquet files,
  ``<dir>/<length>/<qa>-00000-of-00001.parquet``);
* ``process_results`` -> :func:`process_results`: BABILong's ``compare_answers`` (first sentence of the
  output, the task's label set, labels that appear in the question ignored, exactly one label left and it
  is the target), reported as ``acc`` and per length ``acc_<length>``; rows that carry a fact ``depth``
  also give ``acc_d<depth>`` and ``acc_<length>_d<depth>`` (the depth x length heatmap).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any, Dict, Iterator, List, Mapping, Optional, Sequence, Tuple, Union

from torchtune_longshort.data.file_kinds import line_of, row_of
from torchtune_longshort.eval.model.limits import TRUNCATION_FIELD
from torchtune_longshort.eval.tasks import PREFIX
from torchtune_longshort.eval.tasks.babilong.haystack import DEPTHS, LENGTHS
from torchtune_longshort.eval.tasks.babilong.official_prompts import PROMPT_STYLES, check_prompt_style
from torchtune_longshort.eval.tasks.babilong.stories import QA_TASKS, TASK_LABELS
from torchtune_longshort.eval.tasks.common.lengths import per_depth, round_robin_order
from torchtune_longshort.eval.tasks.common.unavailable import (
    ERROR_FIELD,
    MISSING_METRIC,
    TaskDataError,
    load_hub_dataset,
    missing_results,
    nan_results,
    placeholder,
    reason_of,
    refusal_of,
)

log = logging.getLogger(__name__)

HF_DATASET = "RMT-team/babilong-1k-samples"
# A row standing for data that could not be had carries the reason here (the pack's one placeholder field).
MISSING_DATA_FIELD = ERROR_FIELD
# BABILong never cuts a prompt (a model is scored at the lengths it takes): every row declares it, so a prompt
# longer than the model is refused under any model (lm-eval's hf would cut it from the left and score the rest)
TRUNCATION = "none"


def preprocess_output(output: str) -> str:
    """BABILong's output clean-up: lower case, the first sentence, cut where the model starts new examples."""
    output = output.lower().split(".")[0]
    # As in BABILong's metrics.py, including its cut at "Question" after lower-casing, which never matches:
    # kept so that scores equal the benchmark's.
    for marker in ("<context>", "<example>", "Question"):
        output = output.split(marker)[0]
    return output


def compare_answers(target: str, output: str, question: str, task_labels) -> bool:
    """BABILong's answer check (``babilong/metrics.py``): after :func:`preprocess_output`, the labels of the task
    found in the output, minus those found in the question, must be exactly ``{target}`` (case-insensitive
    substring matches); a target with a comma and more than 3 characters (``"apple,milk"``, BABILong's QA8) is a list
    of sub-targets, all of which, and nothing else, must be found."""
    output = preprocess_output(output)
    target = target.lower()
    labels = {label.lower() for label in task_labels}
    in_question = {label for label in labels if label in question.lower()}
    in_output = {label for label in labels if label in output} - in_question
    if "," in target and len(target) > 3:
        subtargets = target.split(",")
        return all(t in in_output for t in subtargets) and len(in_output) == len(subtargets)
    return in_output == {target}


def metric_names() -> List[str]:
    """Every metric :func:`process_results` can emit (the group YAML's ``aggregate_metric_list``)."""
    names = ["acc"] + [f"acc_{l}" for l in LENGTHS] + [per_depth("acc", d) for d in DEPTHS]
    names += [per_depth(f"acc_{l}", d) for l in LENGTHS for d in DEPTHS]
    return names + [MISSING_METRIC]


def process_results(doc: Mapping[str, Any], results: List[str]) -> Dict[str, float]:
    """lm-eval ``process_results``: ``acc``, ``acc_<length>`` and, for rows with a depth, the depth keys.

    A row without data (missing file, hub unreachable) gives ``missing_data`` = 1 and no accuracy, so the group
    mean covers the tasks that have data. A prompt the model refused gives NaN at its length (``acc_<length>``,
    ``acc_<length>_d<depth>``) and no value for the metrics pooled over lengths (``acc``, ``acc_d<depth>``), as
    ``longshort_passkey`` does: before, one refused prompt made the task's ``acc`` (and its group's) NaN. Both
    carry the reason (metric ``error``)."""
    if reason_of(doc):
        return missing_results(reason_of(doc))
    qa = doc.get("qa")
    if qa not in TASK_LABELS:
        raise ValueError(f"a BABILong row has qa={qa!r}; accepted: {list(QA_TASKS)} (load it with load_babilong)")
    refusal = refusal_of(results[0])
    ok = float("nan") if refusal else float(compare_answers(doc["target"], results[0], doc["question"],
                                                            TASK_LABELS[qa]))
    names = [f"acc_{doc['length']}"] + ([] if refusal else ["acc"])
    depth = doc.get("depth")
    out = {n: ok for n in names}
    if depth is not None:
        out.update({per_depth(n, depth): ok for n in names})
    return nan_results(refusal, out) if refusal else out


def parse_lengths(max_seq_lengths: Union[str, Sequence[str]]) -> List[str]:
    """``"0k,4k"`` or ``["0k", "4k"]`` -> ``["0k", "4k"]``, each checked against BABILong's labels."""
    items = max_seq_lengths.split(",") if isinstance(max_seq_lengths, str) else list(max_seq_lengths)
    items = [str(i).strip() for i in items if str(i).strip()]
    bad = [i for i in items if i not in LENGTHS]
    if not items or bad:
        raise ValueError(
            f"max_seq_lengths={max_seq_lengths!r}: {bad or 'empty'} not accepted; accepted: comma list of "
            f"{list(LENGTHS)}"
        )
    return items


def task_of(qa: str) -> str:
    """The pack's task name of BABILong task ``qa`` (``"qa1"`` -> ``"longshort_babilong_qa1"``)."""
    return f"{PREFIX}babilong_{qa}"


def _features():
    import datasets

    s = datasets.Value("string")
    return datasets.Features({"input": s, "question": s, "target": s, "qa": s, "length": s,
                              "depth": datasets.Value("int64"), MISSING_DATA_FIELD: s, TRUNCATION_FIELD: s})


def _placeholder(qa: str, length: str, message: str):
    row = {"input": "", "question": "", "target": "", "qa": qa, "length": length, "depth": None,
           TRUNCATION_FIELD: TRUNCATION}
    return placeholder(task_of(qa), f"length {length}: {message}", row, features=_features())


# the fields a BABILong row must hold as text, and the ones the loader reads besides
ROW_FIELDS = ("input", "question", "target")
OPTIONAL_FIELDS = ("qa", "length", "depth")


def local_files(data_dir: str, length: str, qa: str) -> List[Path]:
    """The local files of one length and task: ``<dir>/<length>/<qa>.jsonl`` (the generator's layout) or, without
    it, the hub's own Parquet shards ``<dir>/<length>/<qa>-00000-of-00001.parquet`` ... (a snapshot of
    ``RMT-team/babilong-1k-samples``: a folder per length config, a file per split); [] if neither is there."""
    folder = Path(data_dir).expanduser() / length
    jsonl = folder / f"{qa}.jsonl"
    return [jsonl] if jsonl.is_file() else sorted(folder.glob(f"{qa}-*.parquet"))  # qa1-* leaves qa10-* out


def _records(path: Path) -> Iterator[Tuple[str, Any]]:
    """``(where, record)`` of each row of ``path``: a JSON line (``"<path>:<N>"``, from 1; blank lines skipped:
    :func:`~torchtune_longshort.data.file_kinds.line_of`) or a
    Parquet row (``"<path> row N"``, from 0, as every reader names it:
    :func:`torchtune_longshort.data.file_kinds.row_of`)."""
    if path.suffix == ".parquet":
        import pyarrow.parquet as pq  # deferred: only a hub snapshot needs it (a dependency of datasets)

        try:
            pf = pq.ParquetFile(path)
            columns = [c for c in ROW_FIELDS + OPTIONAL_FIELDS if c in pf.schema_arrow.names]
            rows = (r for batch in pf.iter_batches(columns=columns, batch_size=256) for r in batch.to_pylist())
            for i, row in enumerate(rows):
                yield row_of(path, i), row
        except Exception as err:  # pyarrow's ArrowInvalid and kin: a torn or mislabelled file
            raise TaskDataError(f"{path}: not a Parquet file pyarrow reads ({type(err).__name__}: {err})") from None
        return
    try:
        with open(path, encoding="utf-8-sig") as f:  # a byte-order mark before the first line is not part of it
            for i, line in enumerate(f):
                if not line.strip():
                    continue
                try:
                    yield line_of(path, i + 1), json.loads(line)
                except json.JSONDecodeError as err:
                    raise TaskDataError(f"{line_of(path, i + 1)}: not a JSON line ({err.msg}); BABILong files hold one "
                                        "JSON object a line") from None
    except UnicodeDecodeError as err:  # it ended the whole run; the text reader decodes ahead, so the line is counted
        raise TaskDataError(f"{line_of(path, _line_of_byte(path, err))}: not UTF-8 ({err.reason}); BABILong files are "
                            "UTF-8 text, one JSON object a line: fix or remove that line") from None


def _line_of_byte(path: Path, err: UnicodeDecodeError) -> int:
    """The line of ``path`` holding the first byte that is no UTF-8 (``err`` is of a reader that decodes ahead, so its
    position is not the file's)."""
    raw = path.read_bytes()
    try:
        raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        return raw.count(b"\n", 0, e.start) + 1
    return 1


def _read_local(paths: Sequence[Path], qa: str, length: str, style: str) -> List[Dict[str, Any]]:
    """The rows of ``paths`` (task ``qa``'s, label ``length``), evaluated under prompt ``style``."""
    rows = []
    for where, row in (r for path in paths for r in _records(path)):
        if not isinstance(row, dict):
            raise TaskDataError(f"{where}: a JSON {type(row).__name__}, not an object with input, question, target")
        missing = [k for k in ROW_FIELDS if k not in row]
        if missing:
            raise TaskDataError(f"{where}: field(s) {missing} missing; BABILong rows need input, question, target")
        wrong = [k for k in ROW_FIELDS if not isinstance(row[k], str)]
        if wrong:
            raise TaskDataError(f"{where}: field(s) {wrong} are not strings ({wrong[0]}={row[wrong[0]]!r}); "
                                "BABILong's input, question and target are text")
        unscorable = _outside_labels(row["target"], qa)
        if unscorable is not None:  # compare_answers finds only the task's labels: it scored 0 whatever was said
            raise TaskDataError(f"{where}: target={row['target']!r} holds {unscorable!r}, no label of task {qa} "
                                f"({', '.join(sorted(TASK_LABELS[qa]))}; a list as 'apple,milk'), so BABILong's "
                                "answer check could never count it right: fix or remove that line")
        if row.get("length", length) != length:
            raise TaskDataError(f"{where}: length={row['length']!r} but the file is in the {length!r} folder")
        if row.get("qa", qa) != qa:
            raise TaskDataError(f"{where}: qa={row['qa']!r} but the file is task {qa}'s")
        # a row sized with its request (generator --fit prompt) was sized for one prompt; one made before rows
        # recorded it, for lm-eval's
        sized_for = row.get("babilong_prompt", PROMPT_STYLES[0] if "prompt_tokens" in row else None)
        if sized_for is not None and sized_for != style:
            raise TaskDataError(f"{where}: sized for the {sized_for!r} prompt (generator --fit prompt --prompt "
                                f"{sized_for}), and the task sends the {style!r} one (babilong_prompt): its requests "
                                f"are not the label's size; generate the rows again with --prompt {style}, or "
                                f"evaluate with babilong_prompt={sized_for!r}")
        depth = row.get("depth")
        if depth is not None and depth not in DEPTHS:
            raise TaskDataError(f"{where}: depth={depth!r}; accepted: {list(DEPTHS)} or null")
        rows.append({"input": row["input"], "question": row["question"], "target": row["target"],
                     "qa": qa, "length": length, "depth": depth, TRUNCATION_FIELD: TRUNCATION})
    return rows


def _outside_labels(target: str, qa: str) -> Optional[str]:
    """The part of ``target`` (a list's item, as :func:`compare_answers` splits it) that is no label of task ``qa``,
    or None."""
    target = target.lower()
    labels = {label.lower() for label in TASK_LABELS[qa]}
    parts = target.split(",") if "," in target and len(target) > 3 else [target]
    return next((part for part in parts if part not in labels), None)


# what a data file without rows is refused with
NO_ROWS_FIX = ("write them (python -m torchtune_longshort.eval.tasks.babilong.generator), or name a babilong_data_dir "
               "that holds them")


def load_babilong(
    qa_split: Optional[str] = None,
    max_seq_lengths: Union[str, Sequence[str]] = "0k",
    babilong_data_dir: Optional[str] = None,
    babilong_missing: str = "skip",
    babilong_prompt: Optional[str] = None,
    **_metadata: Any,
) -> Dict[str, Any]:
    """lm-eval ``custom_dataset`` for one BABILong task; returns ``{qa_split: datasets.Dataset}``.

    Args:
        qa_split: ``"qa1"`` .. ``"qa5"`` (set by the shipped task's ``dataset_kwargs``).
        max_seq_lengths: one or more length labels, ``"0k,1k,4k"`` (lm-eval's shipped metadata key).
        babilong_data_dir: a folder with ``<length>/<qa>.jsonl`` in BABILong's row format (``input``,
            ``question``, ``target``; ``depth`` optional), or a local snapshot of the hub's data set in its own
            layout, ``<length>/<qa>-00000-of-0000N.parquet`` (same columns; :func:`local_files`); without it, the
            hub's ``RMT-team/babilong-1k-samples``.
        babilong_missing: ``"skip"`` (default): a missing or unreadable local file (a line that is not
            JSON, a field missing or of another kind), or hub data that cannot be fetched (offline, unreachable), is
            logged as an error and the task reports ``missing_data`` = 1 and the
            reason (metric ``error``) for that length instead of a score, so the run goes on; ``"error"``: raise
            (``FileNotFoundError`` / ``TaskDataError``).
        babilong_prompt: ``"lm_eval"`` (default) or ``"babilong"``: the prompt the task sends (read by its class,
            :class:`~torchtune_longshort.eval.tasks.babilong.prompt.BabilongTask`; checked here too).
        _metadata: the rest of lm-eval's ``--metadata`` / ``--model_args`` (ignored).
    """
    import datasets

    if qa_split not in QA_TASKS:
        raise ValueError(f"qa_split={qa_split!r}; the longshort_babilong tasks accept {list(QA_TASKS)}")
    if babilong_missing not in ("skip", "error"):
        raise ValueError(f"babilong_missing={babilong_missing!r}; accepted: 'skip', 'error'")
    style = check_prompt_style(babilong_prompt)
    parts = []
    for length in parse_lengths(max_seq_lengths):
        try:
            parts.append(_local_part(babilong_data_dir, length, qa_split, style, babilong_missing)
                         if babilong_data_dir else _hub_part(length, qa_split))
        except TaskDataError as err:  # one bad file scores its length NaN with the reason; the run goes on
            if babilong_missing == "error":
                raise
            parts.append(_placeholder(qa_split, length, str(err)))
    # interleaved across (length, depth), so --limit N keeps every cell: one length's file holds its depths one after
    # another too (the generator's), and --limit 2 of two depths took both rows from the first
    ds = parts[0] if len(parts) == 1 else datasets.concatenate_datasets(parts)
    return {qa_split: ds.select(round_robin_order(list(zip(ds["length"], ds["depth"]))))}


def _local_part(data_dir: str, length: str, qa: str, style: str, missing: str):
    """One length of ``qa`` from ``data_dir`` as a ``datasets.Dataset``; :class:`TaskDataError` for a file that is
    missing (``FileNotFoundError`` when ``missing`` is ``"error"``), unreadable or empty."""
    import datasets

    paths = local_files(data_dir, length, qa)
    if not paths:
        folder = Path(data_dir).expanduser() / length
        msg = (f"BABILong data file not found: neither {folder / qa}.jsonl nor {folder / qa}-*"
               f".parquet (babilong_data_dir={data_dir!r}, length {length}, task {qa}; expected "
               "<dir>/<length>/<qa>.jsonl, as python -m torchtune_longshort.eval.tasks.babilong.generator "
               "writes them, or a snapshot of the hub's Parquet files, "
               "<dir>/<length>/<qa>-00000-of-00001.parquet)")
        raise (FileNotFoundError if missing == "error" else TaskDataError)(msg)
    rows = _read_local(paths, qa, length, style)
    if not rows:
        raise TaskDataError(f"{', '.join(map(str, paths))} has no rows: {NO_ROWS_FIX}")
    return datasets.Dataset.from_list([{**r, MISSING_DATA_FIELD: None} for r in rows], features=_features())


def _hub_part(length: str, qa: str):
    """One length of ``qa`` from the hub's ``RMT-team/babilong-1k-samples``; :class:`TaskDataError` when it cannot
    be had."""
    ds = load_hub_dataset(HF_DATASET, name=length, split=qa, alternative=(
        "for local data pass babilong_data_dir=<folder of <length>/<qa>.jsonl, or of a snapshot of the "
        "hub's <length>/<qa>-*.parquet> in --metadata (e.g. from python -m "
        "torchtune_longshort.eval.tasks.babilong.generator)"))
    ds = ds.select_columns(["input", "question", "target"])
    n = len(ds)
    ds = ds.add_column("qa", [qa] * n).add_column("length", [length] * n)
    ds = ds.add_column("depth", [None] * n).add_column(MISSING_DATA_FIELD, [None] * n)
    ds = ds.add_column(TRUNCATION_FIELD, [TRUNCATION] * n)
    return ds.cast(_features())
