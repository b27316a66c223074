"""The lm-eval task pack, installed with the package, and the registry of its task families.

Each family is a folder here (its YAML next to its module, ``<folder>/task.py``) and one line of
:data:`TASK_FAMILIES`, which declares its lm-eval name, its metadata keys and its metrics. The study, its runner,
claims and figures and the eval report read the registry; nothing else spells a task or metric name.

Every task and group name of the pack starts with :data:`PREFIX`, so that none is (or later becomes) one of
lm-eval's built-in names (``tests/test_task_names.py`` checks it against lm-eval's ``TaskManager``).

``longshort-eval`` finds the pack by itself; for stock ``lm-eval``, :func:`tasks_path` is the folder to pass as
``--include_path`` (``longshort-eval tasks-path`` prints it). Importing this module imports neither lm-eval nor torch.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.eval.tasks.babilong.haystack import LENGTHS as BABILONG_LENGTHS
from torchtune_longshort.eval.tasks.babilong.official_prompts import PROMPT_STYLES as BABILONG_PROMPTS
from torchtune_longshort.eval.tasks.common.lengths import (
    METADATA_KEY as METADATA_LENGTHS_KEY, comparable, lengths_source, parse_lengths, percentages,
)
from torchtune_longshort.eval.tasks.common.divergence_names import divergence_names, divergence_refusal
from torchtune_longshort.eval.tasks.common.local_files import exist_hint, local_suffixes
from torchtune_longshort.eval.tasks.common.suffix_range import FRAC_KEYS, FRAC_WORDS, fraction, suffix_fractions
from torchtune_longshort.eval.tasks.common.long_text import SOURCES, TEXT_DEFAULTS, flag
from torchtune_longshort.eval.tasks.common.unavailable import MISSING_METRIC, TaskDataError

# Every task, group and tag name of the pack starts with PREFIX (its home: the ground-floor pack_prefix module).
from torchtune_longshort.pack_prefix import PREFIX  # noqa: F401  (re-exported)


@dataclass(frozen=True)
class TaskFamily:
    """One task (or group) of the pack, as everything outside its folder sees it.

    Attributes:
        task: its lm-eval task or group name (``--tasks``).
        folder: its folder under :func:`tasks_path`.
        metrics: the metrics it reports, by base name; a length-swept family reports each as
            ``<metric>_<length label>`` (``ppl_4k``), its lengths taken from ``--metadata``. Its YAMLs' ``metric_list``
            is ``metrics + diagnostics``, in this order (``tests/test_task_metric_names.py`` checks every file).
        diagnostics: what it reports about the run rather than the model (``missing_data``: 1 for a group member
            without data), listed after ``metrics``; never tabulated.
        study_names: ``(name, metric)``: the names the study's tables, claims and figures give its metrics
            (``study.eval_config.metric_of``).
        metadata_prefix: the prefix of its own ``--metadata`` keys (``ppl`` -> ``ppl_max_seq_lengths``,
            ``ppl_source``, ``ppl_num_samples``); "" when it has none.
        metadata_keys: every ``--metadata`` key of its own that its task reads, in full (``ppl_source``), its
            ``data_dir_key`` and ``value_kinds`` keys included: the one list :func:`unknown_metadata_keys` checks
            (``tests/test_task_metadata_keys.py`` checks it against the keys the task modules spell).
        length_swept: whether its lengths come from ``--metadata`` (``max_seq_lengths``, or its own
            ``<prefix>_max_seq_lengths`` when ``metadata_keys`` lists it).
        fixed_context: the lm-eval options (:data:`CONTEXT_OPTIONS`) that would change what it measures, because
            it sizes its sequences itself: its task ignores them, with one warning each (``docs/eval.md``).
        generates: whether its requests are generations (``generate_until``: lm-eval's ``--gen_kwargs`` reach them);
            False for the tasks that only score text (``longshort_ppl``, ``longshort_misalignment``).
        table_metrics: the metrics the eval report tabulates by length (rows = runs, columns = lengths).
        data_dir_key: the ``--metadata`` key of a local data folder ("" when it has none).
        needs_model: the lm-eval model it needs ("" when any model will do).
        former_names: its names in results files of earlier versions (read, never written).
        value_kinds: ``(key, kind)`` of its own ``--metadata`` keys whose values are checked before a run
            (:func:`check_metadata_values`; a kind of :data:`VALUE_KINDS`); its ``data_dir_key`` is checked as a
            ``folder`` without being listed.
        min_length: the shortest length in tokens it can score (a shorter one in ``--metadata`` is refused before
            the run: :func:`check_task_lengths`); 0 for BABILong, whose ``0k`` is its empty haystack.
        length_labels: the labels its lengths are named by, when they are labels and not token counts (BABILong's
            ``0k``, ``1k``, ...): the shared ``max_seq_lengths`` of a run that includes it must hold only those.
        measured_by: its ``--metadata`` keys whose value changes what its metrics measure (the data, the prompt, the
            haystack, the seed that draws them; its lengths are not: each is a column of its tables): the eval report
            names each one its runs differ in (:func:`measured_settings`).
        measured_defaults: ``(key, value)``: the value a key of ``measured_by`` takes when unset, where the task's
            code (not its YAML, which the results file records) sets it.
    """

    task: str
    folder: str
    metrics: Tuple[str, ...]
    metadata_prefix: str = ""
    length_swept: bool = True
    table_metrics: Tuple[str, ...] = ()
    data_dir_key: str = ""
    needs_model: str = ""
    former_names: Tuple[str, ...] = ()
    diagnostics: Tuple[str, ...] = ()
    study_names: Tuple[Tuple[str, str], ...] = ()
    value_kinds: Tuple[Tuple[str, str], ...] = ()
    metadata_keys: Tuple[str, ...] = ()
    min_length: int = 0
    length_labels: Tuple[str, ...] = ()
    fixed_context: Tuple[str, ...] = ()
    generates: bool = True
    measured_by: Tuple[str, ...] = ()
    measured_defaults: Tuple[Tuple[str, Any], ...] = ()


# The lm-eval options that put something before a request's own text: few-shot examples, a chat template, a system
# instruction (the options of lm-eval's CLI, by the names its task API takes them).
# The results file's task-config key listing the lm-eval options a task ignored (TaskFamily.fixed_context).
IGNORED_KEY = "ignored_options"
# The task YAML key whose value says why the task's prompt goes without the model's chat template (LongBench's pred.py
# leaves it out for its few-shot and code datasets): lm-eval's --apply_chat_template is then ignored, with that
# reason, and listed under IGNORED_KEY.
NO_CHAT_KEY = "no_chat_template"
CONTEXT_OPTIONS = {"num_fewshot": "--num_fewshot", "apply_chat_template": "--apply_chat_template",
                   "system_instruction": "--system_instruction"}
# The keys shared by the length-swept tasks (a task's own <prefix>_max_seq_lengths wins).
SHARED_KEYS = ("max_seq_lengths",)
# The keys long_text.samples_from_metadata reads under a text family's prefix (ppl_source, mis_num_samples, ...).
TEXT_KEYS = ("max_seq_lengths", "source", "data_files", "dataset_path", "dataset_name", "split", "text_field",
             "num_samples", "chunks_per_doc", "join_documents", "skip_bad_records")
# The text keys that say which sequences are scored (the number of them is the report's sample count).
TEXT_DATA_KEYS = ("source", "data_files", "dataset_path", "dataset_name", "split", "text_field", "chunks_per_doc",
                  "join_documents", "skip_bad_records")


# The passkey task's settings when --metadata leaves them out (passkey/task.py reads them from here).
PASSKEY_DEFAULTS = {"depths": [0, 25, 50, 75, 100], "seed": 0, "haystack": "filler"}
# passkey_haystack's names (its YAML comment and docs/eval.md list them): not hf, whose dataset_path no key names
PASSKEY_HAYSTACKS = ("filler", *(s for s in SOURCES if s != "hf"))
MIS_DEFAULT_SEED = 0  # the misalignment task's mis_seed when left out (misalignment/task.py reads it from here)


def _defaults(prefix: str, defaults: Mapping[str, Any]) -> Tuple[Tuple[str, Any], ...]:
    """``measured_defaults`` entries ``(<prefix>_<key>, value)`` of a task's own defaults."""
    return tuple((f"{prefix}_{k}", v) for k, v in defaults.items())


def _keys(prefix: str, *names: str) -> Tuple[str, ...]:
    return tuple(f"{prefix}_{name}" for name in names)


TASK_FAMILIES: Dict[str, TaskFamily] = {
    "ppl": TaskFamily("longshort_ppl", "ppl", ("ppl", "token_nll", "curve_mean_nll"), "ppl",
                      table_metrics=("ppl",), former_names=("long_ppl",), study_names=(("ppl", "ppl"),),
                      metadata_keys=_keys("ppl", *TEXT_KEYS), fixed_context=tuple(CONTEXT_OPTIONS), generates=False,
                      min_length=2, measured_by=_keys("ppl", *TEXT_DATA_KEYS),
                      measured_defaults=_defaults("ppl", TEXT_DEFAULTS)),
    "passkey": TaskFamily("longshort_passkey", "passkey", ("acc", "digits"), "passkey", table_metrics=("acc",),
                          study_names=(("passkey", "acc"), ("passkey_digits", "digits")),
                          value_kinds=(("passkey_haystack", "haystack"), ("passkey_depths", "percentages"),
                                       ("passkey_seed", "integer"), ("passkey_data_files", "files")),
                          metadata_keys=_keys("passkey", "max_seq_lengths", "num_samples", "depths", "seed",
                                              "haystack", "haystack_files", "data_files"),
                          fixed_context=("num_fewshot",), min_length=2,
                          measured_by=_keys("passkey", "depths", "seed", "haystack", "haystack_files", "data_files"),
                          measured_defaults=_defaults("passkey", PASSKEY_DEFAULTS)),
    "misalignment": TaskFamily("longshort_misalignment", "misalignment", ("sce", "jeffreys", "js"), "mis",
                               table_metrics=("sce", "jeffreys", "js"), needs_model="longshort",
                               former_names=("misalignment",),
                               study_names=(("misalignment", "sce"), ("jeffreys", "jeffreys")),
                               metadata_keys=_keys("mis", *TEXT_KEYS, "seed", "divergences", "min_frac", "max_frac"),
                               value_kinds=(("mis_seed", "integer"), ("mis_divergences", "divergences"),
                                            *((key, "fraction") for key, _ in FRAC_KEYS)),
                               fixed_context=tuple(CONTEXT_OPTIONS), generates=False, min_length=2,
                               measured_by=_keys("mis", *TEXT_DATA_KEYS, "seed", "min_frac", "max_frac"),
                               measured_defaults=(*_defaults("mis", {**TEXT_DEFAULTS, "seed": MIS_DEFAULT_SEED}),
                                                  *FRAC_KEYS)),
    "babilong": TaskFamily("longshort_babilong", "babilong", ("acc",), "babilong", data_dir_key="babilong_data_dir",
                           former_names=("babilong_longshort",), diagnostics=(MISSING_METRIC,),
                           study_names=(("babilong", "acc"),),
                           value_kinds=(("babilong_missing", "skip or error"), ("babilong_prompt", "prompt style")),
                           length_labels=tuple(BABILONG_LENGTHS),
                           metadata_keys=_keys("babilong", "data_dir", "missing", "prompt"),
                           measured_by=_keys("babilong", "data_dir", "prompt"),
                           measured_defaults=(("babilong_prompt", BABILONG_PROMPTS[0]),)),
    "longbench_e": TaskFamily("longshort_longbench_e", "longbench_e",
                              ("score", "score_0_4k", "score_4_8k", "score_8k_plus"), "longbench_e",
                              length_swept=False, data_dir_key="longbench_e_data_dir",
                              former_names=("longbench_e_full",), diagnostics=(MISSING_METRIC,),
                              value_kinds=(("longbench_e_missing", "skip or error"),),
                              metadata_keys=_keys("longbench_e", "data_dir", "hf_path", "missing"),
                              measured_by=_keys("longbench_e", "data_dir", "hf_path")),
}


def tasks_path() -> Path:
    """The installed task pack: the folder to give stock ``lm-eval`` as ``--include_path``."""
    return Path(__file__).resolve().parent


def task_name(family: str) -> str:
    """The lm-eval name of study / report family ``family`` (a key of :data:`TASK_FAMILIES`)."""
    if family not in TASK_FAMILIES:
        raise ValueError(f"task family {family!r} is not in the pack; accepted: {sorted(TASK_FAMILIES)}")
    return TASK_FAMILIES[family].task


def family_of(task: str) -> Optional[str]:
    """The family whose lm-eval name (or former name) is ``task``; None for any other task."""
    for key, fam in TASK_FAMILIES.items():
        if task == fam.task or task in fam.former_names:
            return key
    return None


def fixed_context_of(task: str) -> Tuple[str, ...]:
    """The lm-eval options task ``task`` ignores (:attr:`TaskFamily.fixed_context`; none for a task not of the
    pack, or a group member: those apply every option)."""
    family = family_of(task)
    return TASK_FAMILIES[family].fixed_context if family else ()


def generates(task: str) -> bool:
    """Whether task ``task`` may make generation requests: a family of the pack says (:attr:`TaskFamily.generates`);
    any other task or group (lm-eval's, a group member of the pack) may."""
    family = family_of(task)
    return TASK_FAMILIES[family].generates if family else True


def current_name(task: str) -> str:
    """``task`` under its current name (a former name of a family becomes the family's name)."""
    family = family_of(task)
    return TASK_FAMILIES[family].task if family else task


def task_results(results: Mapping[str, Any], task: str) -> Dict[str, Any]:
    """The metrics of ``task`` in a ``{task: {metric: value}}`` mapping, found under its name or, for a family of
    the pack, a former one (results written before the pack's names took the :data:`PREFIX`); ``{}`` when absent."""
    family = family_of(task)
    names = (task,) if family is None else (TASK_FAMILIES[family].task, *TASK_FAMILIES[family].former_names)
    for name in names:
        if isinstance(results.get(name), Mapping):
            return dict(results[name])
    return {}


def measured_settings(family: TaskFamily, metadata: Mapping[str, Any]) -> Dict[str, Any]:
    """``{key: value}`` of each of ``family``'s :attr:`TaskFamily.measured_by` keys in a task's ``metadata`` (as its
    results file records it: its YAML's defaults with ``--metadata`` over them); an unset key takes its
    :attr:`TaskFamily.measured_defaults` value, else None (the task's own default); a list in any of its forms as
    its task reads it (:func:`~.common.lengths.comparable`: ``"0,50,100"`` is ``[0, 50, 100]``)."""
    defaults = dict(family.measured_defaults)
    return {k: comparable(k, metadata[k] if metadata.get(k) not in (None, "", []) else defaults.get(k))
            for k in family.measured_by}


def pack_metadata_keys(also=()) -> List[str]:
    """Every ``--metadata`` key a task of the pack reads: each family's :attr:`TaskFamily.metadata_keys`, the
    shared :data:`SHARED_KEYS`, and ``also`` (the model keys the caller passes on)."""
    return sorted({*SHARED_KEYS, *also, *(k for f in TASK_FAMILIES.values() for k in f.metadata_keys)})


def _braced(prefix: str, keys: Tuple[str, ...]) -> str:
    """``ppl_{source,num_samples}`` for keys that all start with ``<prefix>_`` (else the keys, comma-separated)."""
    head = prefix + "_"
    if not prefix or not all(k.startswith(head) for k in keys):
        return ", ".join(keys)
    return head + "{" + ",".join(k[len(head):] for k in keys) + "}"


def _nearest_key(key: str, known: List[str]) -> Optional[str]:
    """The real key nearest to ``key``: among its family's keys when it starts with a family's prefix (and the
    shared lengths key, for a length-swept family), else among ``known``. A length-swept family without lengths of
    its own (BABILong) reads ``max_seq_lengths``: that is the answer for ``babilong_max_seq_lengths`` and its typos;
    a family that takes no lengths has no answer for a lengths key."""
    families = [f for f in TASK_FAMILIES.values() if f.metadata_prefix and key.startswith(f.metadata_prefix + "_")]
    family = max(families, key=lambda f: len(f.metadata_prefix)) if families else None
    if family is not None and not family.length_swept and key.endswith(SHARED_KEYS[0]):
        return None  # LongBench-E takes no lengths: no key is near what was meant
    names = {k: k for k in (known if family is None else family.metadata_keys)}
    for f in TASK_FAMILIES.values() if family is None else (family,):
        if f.length_swept:
            names.update({k: k for k in SHARED_KEYS})
            names.setdefault(f"{f.metadata_prefix}_{SHARED_KEYS[0]}", SHARED_KEYS[0])
    match = difflib.get_close_matches(key, list(names), n=1)
    return names[match[0]] if match else None


def unknown_metadata_keys(keys, also=(), tasks=()) -> Tuple[List[str], str]:
    """The keys of ``keys`` that no task of the pack reads (:func:`pack_metadata_keys`), and the message: the
    nearest real key of each (:func:`_nearest_key`), then the keys each task reads: the tasks of ``tasks`` (a run's
    task and group names; a group member, ``longshort_babilong_qa1``, counts as its family), every family when none
    of them is the pack's."""
    known = pack_metadata_keys(also)
    keys = [keys] if isinstance(keys, str) else keys  # one key, not its characters
    bad = [str(k) for k in keys if str(k) not in known]
    near = [m for m in (_nearest_key(k, known) for k in bad) if m]
    hint = f" (did you mean {', '.join(repr(m) for m in near)}?)" if near else ""
    named = [f for f in TASK_FAMILIES.values() if any(t == f.task or t.startswith(f.task + "_") for t in tasks)]
    per_task = "; ".join(f"{f.task}: {_braced(f.metadata_prefix, f.metadata_keys)}"
                         for f in named or TASK_FAMILIES.values())
    shared = ", ".join(sorted({*SHARED_KEYS, *also}))
    return bad, f"no task of the pack reads them{hint}; the pack reads {shared} and, per task, {per_task}"

# The families whose sequences come from long_text.samples_from_metadata (their <prefix>_source takes its SOURCES)
TEXT_PREFIXES = tuple(TASK_FAMILIES[f].metadata_prefix for f in ("ppl", "misalignment"))
# The keys naming local text (paths, globs, folders) that long_text.iter_texts reads: checked before a run starts
# (_check_local_files), where a name that matches nothing scored NaN
LOCAL_FILES_KEYS = (*(f"{p}_data_files" for p in TEXT_PREFIXES), "passkey_haystack_files")


def _paths(value: Any) -> List[str]:
    return [str(value)] if isinstance(value, (str, Path)) else [str(v) for v in value]


# What a kind of TaskFamily.value_kinds accepts: (the check, the words for it in the refusal).
VALUE_KINDS = {
    "haystack": (lambda v: v in PASSKEY_HAYSTACKS, f"one of {', '.join(PASSKEY_HAYSTACKS)}"),
    "percentages": (lambda v: percentages(v) is not None,
                    "percentages in [0, 100]: a list or a comma list, e.g. [0, 50, 100] or \"0,50,100\""),
    "integer": (lambda v: (isinstance(v, int) and not isinstance(v, bool)) or (isinstance(v, str) and v.isdigit()),
                "an integer"),
    "files": (lambda v: isinstance(v, (str, Path, list)) and all(Path(f).expanduser().is_file() for f in _paths(v)),
              "a file, or a list of files, that exist"),
    "folder": (lambda v: isinstance(v, (str, Path)) and Path(v).expanduser().is_dir(), "a folder that exists"),
    "fraction": (lambda v: fraction(v) is not None, FRAC_WORDS),
    "skip or error": (lambda v: v in ("skip", "error"), "skip or error"),
    "prompt style": (lambda v: v in BABILONG_PROMPTS, f"{' or '.join(BABILONG_PROMPTS)} (the prompt BABILong's tasks "
                     "send: lm-eval's babilong_qa* prompts, or BABILong's own)"),
    "divergences": (lambda v: divergence_names(v) is not None,
                    "divergence names among sce, jeffreys, js, or dotted paths of functions of your own that import "
                    "(my_divs.my_div, PYTHONPATH=.): a list, or one name or a comma list (\"sce,js\")"),
}


def check_metadata_values(metadata: Mapping[str, Any]) -> None:
    """:class:`TaskDataError` for a ``--metadata`` value that no task can use: the text keys (``<prefix>_source`` of
    :data:`TEXT_PREFIXES`, any ``<prefix>_num_samples`` / ``_chunks_per_doc``, ``_join_documents`` /
    ``_skip_bad_records``), the files of :data:`LOCAL_FILES_KEYS` and each family's :attr:`TaskFamily.value_kinds`:
    what the task would score NaN for (or report as missing data) with the same reason, told before a run starts."""
    kinds = {key: kind for family in TASK_FAMILIES.values() for key, kind in family.value_kinds}
    kinds.update({f.data_dir_key: "folder" for f in TASK_FAMILIES.values() if f.data_dir_key})
    for key, value in metadata.items():
        key = str(key)
        if value is None or value == "" or value == []:  # unset: the task's default (the study writes such keys)
            continue
        if key in kinds and not VALUE_KINDS[kinds[key]][0](value):
            why = divergence_refusal(value) if kinds[key] == "divergences" else ""
            raise TaskDataError(f"{key}={value!r}: expected {VALUE_KINDS[kinds[key]][1]}{why}")
        if key.endswith("_source") and key[: -len("_source")] in TEXT_PREFIXES and value not in SOURCES:
            raise TaskDataError(f"{key}={value!r} is not a source; accepted: {', '.join(SOURCES)}")
        if key.endswith(("_num_samples", "_chunks_per_doc")):
            number = int(value) if isinstance(value, int) or (isinstance(value, str) and value.isdigit()) else 0
            if isinstance(value, bool) or number < 1:
                raise TaskDataError(f"{key}={value!r}: expected an integer >= 1")
        if key.endswith(("_join_documents", "_skip_bad_records")):
            flag(metadata, key)
        if key in LOCAL_FILES_KEYS:
            _check_local_files(key, value)
    suffix_fractions(metadata)  # mis_min_frac past mis_max_frac (a default named as such)


def member_family(task: str) -> Optional[TaskFamily]:
    """The family of ``task``, or of the group a member of it belongs to (``longshort_babilong_qa1`` reads its
    lengths as ``longshort_babilong`` does); None for a task of no family."""
    return TASK_FAMILIES.get(family_of(task) or family_of(task.rsplit("_", 1)[0]) or "")


def check_task_lengths(metadata: Mapping[str, Any], tasks: Sequence[str]) -> None:
    """:class:`TaskDataError` for a length in ``metadata`` (``max_seq_lengths``, or a task's own
    ``<prefix>_max_seq_lengths``) shorter than a task of ``tasks`` that sweeps it can score
    (:attr:`TaskFamily.min_length`): it scored NaN, the run exiting 0 with a results file."""
    for task in tasks:
        family = TASK_FAMILIES.get(family_of(task) or "")
        labelled = member_family(task)  # a group's member reads its lengths as its group does
        if labelled is not None and labelled.length_labels:
            _check_length_labels(metadata, task, labelled.length_labels)
        if family is None or not family.length_swept or not family.min_length:
            continue
        key = lengths_source(metadata, family.metadata_prefix)
        if metadata.get(key) in (None, "", []):  # the task's own default lengths
            continue
        short = [n for n in parse_lengths(metadata[key], key) if n < family.min_length]
        if short:
            raise TaskDataError(f"{key}={metadata[key]!r}: {family.task} scores lengths of at least "
                                f"{family.min_length} tokens ({', '.join(map(str, short))} given)")


def _check_length_labels(metadata: Mapping[str, Any], task: str, labels: Sequence[str]) -> None:
    """A task whose lengths are ``labels`` (BABILong's ``0k``, ``1k``, ...) reads the shared ``max_seq_lengths``
    (lm-eval's shipped key) as such: token counts there, meant for the other tasks of the run, ended the run once the
    model had loaded."""
    given = metadata.get(METADATA_LENGTHS_KEY)
    if given in (None, "", []):
        return
    items = [str(i).strip() for i in (given.split(",") if isinstance(given, str) else given) if str(i).strip()]
    bad = [i for i in items if i not in labels]
    if bad:
        raise TaskDataError(f"max_seq_lengths={given!r}: {task} reads it as its length labels ("
                            f"{', '.join(labels)}), and {', '.join(bad)} is none; give the other tasks "
                            "their own lengths (ppl_max_seq_lengths, passkey_max_seq_lengths, mis_max_seq_lengths) and "
                            "max_seq_lengths these labels, or run the task apart")


def _check_local_files(key: str, value: Any) -> None:
    """A text family's ``data_files`` (paths, globs, folders) name files, as the task reads them: one that names
    nothing scored NaN, the run exiting 0 with a results file."""
    if not isinstance(value, (str, Path, list)):
        raise TaskDataError(f"{key}={value!r}: expected a path, glob or folder, or a list of them")
    try:
        resolve_files(value, local_suffixes(), key)
    except (FileNotFoundError, ValueError) as e:
        raise TaskDataError(exist_hint(e)) from None
