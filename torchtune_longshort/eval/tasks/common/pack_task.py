"""The lm-eval task class of every task in the pack (YAML ``class: !function ...pack_task.PackTask``).

What it adds to lm-eval's ``ConfigurableTask``:

* **Metrics per length.** A task YAML lists its base metrics once (``ppl`` with its aggregation);
  ``process_results`` reports them per length and depth, ``<metric>_<suffix>`` (``ppl_4k``, ``acc_2k_d50``: names
  from :mod:`.lengths`). lm-eval looks a reported metric's aggregation up by its exact name and falls back to a
  plain mean (with a warning) for names its ``metric_list`` lacks, so each suffixed name gets the aggregation and
  ``higher_is_better`` of its base metric the first time it is reported.
* **No request for what cannot be scored.** A placeholder row (data missing, a length the model does not cover,
  :mod:`.unavailable`) and a generation request the evaluated model has no room for (lm-eval's ``hf`` asserts on a
  generation budget as long as the model; it cuts a prompt from the left) are built as *unsent* requests: lm-eval
  sends a request ``repeats`` times, here zero, and the answer is already there (empty, with the reason). The
  decision for another model's generation requests is :meth:`RequestLimits.plan`, the one the ``longshort``
  model makes for itself.
* **Reasons outside the metric table.** ``process_results`` functions return the reason a sample was not scored
  under :data:`.unavailable.ERROR_METRIC`; this class takes it out of the metrics (lm-eval would print it in its
  table) and writes the distinct reasons, with their sample counts, to the task's entry of the results file's
  ``configs`` block, under :data:`.unavailable.NOT_SCORED_KEY`; a length-swept task also the lengths of those
  samples, under :data:`.unavailable.NOT_SCORED_LENGTHS_KEY` (``{"4k": <samples>}``).
* **Requests built for this run.** lm-eval's ``--cache_requests`` keys its cache by task name, few-shot count and
  tokenizer, not by the task's ``--metadata``, from which every task of the pack builds its documents (lengths,
  source, sample counts, seeds, data folders): a cache built under other metadata would be replayed (a 256-token
  request scored as a 512-token sample). The pack's tasks never read or write that cache (their documents are cheap
  to build) and say so in one log line per run. A family's :attr:`TaskFamily.fixed_context` options (``--num_fewshot``,
  ``--apply_chat_template``, ``--system_instruction``), which would put text before the sequence it sized itself,
  are ignored with one warning each, and the results file's task entry lists them under :data:`IGNORED_KEY`.
  ``--seed`` has no effect on the pack's data (its tasks draw from their own metadata seeds): one log line says so.
* **A shipped task as the base.** ``lm_eval_base: <path under lm_eval/tasks>.yaml`` starts the task from one of
  lm-eval's own task files (its prompt, few-shot examples and generation settings), which the YAML's own keys
  override: the pack's LongBench-E and BABILong tasks keep lm-eval's prompts under names of their own.
"""

from __future__ import annotations

import contextlib
import contextvars
import logging
import re
import sys
import weakref
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional, Sequence

from lm_eval.api.instance import Instance
from lm_eval.api.task import ConfigurableTask

from torchtune_longshort._quiet import dropping
from torchtune_longshort.eval.cli_argv import canonical_options, option as option_value
from torchtune_longshort.eval.console_log import ALIKE_ON_EVERY_RANK, follow_lm_eval_logging
from torchtune_longshort.eval.model.limits import RequestLimits, declared_truncation
from torchtune_longshort.eval.tasks import (
    CONTEXT_OPTIONS,
    IGNORED_KEY,
    NO_CHAT_KEY,
    TASK_FAMILIES,
    family_of,
    fixed_context_of,
)
from torchtune_longshort.eval.tasks.common.lengths import length_label, per_depth, round_robin_order
from torchtune_longshort.eval.tasks.common.token_sequences import tokenizer_from_metadata
from torchtune_longshort.eval.tasks.common.unavailable import (
    ERROR_FIELD,
    ERROR_METRIC,
    LIMIT_LEFT_OUT_KEY,
    NOT_SCORED_KEY,
    NOT_SCORED_LENGTHS_KEY,
    RefusedText,
    TaskDataError,
    evaluated_model,
    model_of,
    model_positions,
    placeholder,
    reason_of,
)

logger = logging.getLogger(__name__)

# The task YAML key naming the lm-eval task file a task starts from (a path under lm_eval/tasks/).
BASE_KEY = "lm_eval_base"
# lm-eval's hf model generates this many tokens when a task does not say (its ``max_gen_toks`` default).
DEFAULT_MAX_GEN_TOKS = 256
# What has been said once in this run (the cache and --seed notes); emptied when the run's tasks are built.
_TOLD: set = set()
# The task whose dataset or sample results are being built: a task of one's own whose YAML names the pack's functions
# (my_ppl with ppl.task.long_ppl_dataset) is named in their reasons, not the pack's task they were written for.
_RUNNING: contextvars.ContextVar[Optional[str]] = contextvars.ContextVar("longshort_running_task", default=None)


def running_task(default: str) -> str:
    """The name of the task whose data or results are being built (:class:`PackTask`), else ``default``."""
    return _RUNNING.get() or default


@contextlib.contextmanager
def _running(task: Optional[str]):
    token = _RUNNING.set(task)
    try:
        yield
    finally:
        _RUNNING.reset(token)


def lm_eval_base_config(relative: str) -> Dict[str, Any]:
    """The config of lm-eval's own task file ``lm_eval/tasks/<relative>``, functions resolved, without the keys
    that would give the pack's task lm-eval's name or tags (``task``, ``tag``, ``group``, ``task_alias``)."""
    import lm_eval.tasks
    from lm_eval.tasks._yaml_loader import load_yaml

    path = Path(lm_eval.tasks.__file__).resolve().parent / relative
    if not path.is_file():
        raise FileNotFoundError(f"{BASE_KEY}={relative!r}: the installed lm-eval has no {path} (the pack is "
                                "written against lm-eval 0.4.13, the version pyproject.toml pins)")
    cfg = dict(load_yaml(path, resolve_func=True))
    for key in ("task", "tag", "group", "task_alias"):
        cfg.pop(key, None)
    return cfg


def unsent_request(request_type: str, doc: Dict[str, Any], arguments: tuple, reason: str,
                   metadata: tuple) -> Instance:
    """A request lm-eval never sends (``repeats`` = 0), its answer already given: an empty text whose ``refusal``
    is ``reason`` (read by :func:`.unavailable.refusal_of`; placeholder rows are scored from their ``error``)."""
    task, doc_id, _ = metadata
    inst = Instance(request_type=request_type, doc=doc, arguments=arguments, idx=0,  # type: ignore[arg-type]
                    metadata=(task, doc_id, 0))
    inst.resps.append(RefusedText(reason))
    return inst


class PackTask(ConfigurableTask):
    """``ConfigurableTask`` with metrics per length, unsent requests for what cannot be scored, reasons outside
    the metric table and an optional lm-eval task file as its base (see the module docstring)."""

    # counts each process keeps for its own documents; several processes sum them on rank 0 (eval.model.processes)
    SUMMED_OVER_PROCESSES = ("not_scored", "not_scored_lengths")

    def __init__(self, config: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        follow_lm_eval_logging()  # stock lm_eval --include_path: the pack's lines print as lm-eval's own
        config = dict(config or {})
        config.pop("class", None)  # lm-eval passes the YAML's ``class`` key through; TaskConfig rejects it
        base = config.pop(BASE_KEY, None)
        self.no_chat_template: Optional[str] = config.pop(NO_CHAT_KEY, None)  # why this prompt goes without one
        if base:
            config = {**lm_eval_base_config(str(base)), **config}
        super().__init__(config=config, **kwargs)
        self.not_scored: Dict[str, int] = {}
        self.not_scored_lengths: Dict[str, int] = {}  # length label -> samples not scored (length-swept tasks)
        # (a weak reference to the evaluated model, its RequestLimits when not longshort; False: none known):
        # a task dict loaded once may be evaluated with two models in turn (Python callers comparing them)
        self._other_limits: Any = None
        self._counter: Any = None  # the model's tokenizer (counts prompt tokens); False: unavailable
        self.ignored: List[str] = []  # lm-eval options this task ignored (TaskFamily.fixed_context)
        self.left_out: List[str] = []  # the length x depth cells --limit left without a document (_check_limit)
        _TOLD.clear()  # lm-eval builds every task of a run before it builds their requests: one note per run

    # ------------------------------------------------------------------ metrics
    def base_metric(self, key: str) -> Optional[str]:
        """The ``metric_list`` name ``key`` is a per-length / per-depth variant of (None: not one)."""
        bases = [m for m in self._aggregation_list if key.startswith(m + "_")]
        return max(bases, key=len) if bases else None

    def download(self, dataset_kwargs: Optional[Dict[str, Any]] = None, **kwargs: Any) -> None:
        # lm-eval hints "<task>: Custom kwargs can be passed to `--metadata` ..." at every custom_dataset task's
        # download, --metadata given or not; this task reads it, and its YAML and the README name its keys
        hint = [(logging.WARNING, rf"^{re.escape(str(self.config.task))}: Custom kwargs can be passed to `--metadata`")]
        with _running(self.config.task), dropping("lm_eval.api.task", hint):  # reasons name this task (running_task)
            super().download(dataset_kwargs, **kwargs)

    def process_results(self, doc: Dict[str, Any], results: Any) -> Dict[str, Any]:
        with _running(self.config.task):
            out = dict(super().process_results(doc, results))
        reason = out.pop(ERROR_METRIC, "")
        if reason:
            self.not_scored[str(reason)] = self.not_scored.get(str(reason), 0) + 1
            label = self._swept_length(doc)
            if label:
                self.not_scored_lengths[label] = self.not_scored_lengths.get(label, 0) + 1
        for key in out:
            self.add_metric(key)
        return out

    def add_metric(self, key: str) -> None:
        """Give a per-length / per-depth metric ``key`` its base metric's aggregation and ``higher_is_better`` (also
        asked for a metric only another process scored: ``eval.model.processes.complete_metric_keys``)."""
        base = None if key in self._aggregation_list else self.base_metric(key)
        if base is not None:
            self._aggregation_list[key] = self._aggregation_list[base]
            self._higher_is_better[key] = self._higher_is_better.get(base)

    def _swept_length(self, doc: Dict[str, Any]) -> str:
        """The label of ``doc``'s length in a length-swept family's task ("" for any other task or row)."""
        family = family_of(str(self.config.task))
        if not family or not TASK_FAMILIES[family].length_swept or not isinstance(doc.get("length"), int):
            return ""
        return length_label(int(doc["length"]))

    def dump_config(self) -> dict:
        cfg = super().dump_config()
        if self.not_scored:
            cfg[NOT_SCORED_KEY] = dict(self.not_scored)
        if self.not_scored_lengths:
            cfg[NOT_SCORED_LENGTHS_KEY] = dict(self.not_scored_lengths)
        if self.ignored:
            cfg[IGNORED_KEY] = list(self.ignored)
        if self.left_out:
            cfg[LIMIT_LEFT_OUT_KEY] = list(self.left_out)
        return cfg

    # ------------------------------------------------------------------ lm-eval's options
    def build_all_requests(self, **kwargs: Any) -> None:
        """lm-eval's request building without its request cache, and without the options of the task's
        :attr:`TaskFamily.fixed_context` (see the module docstring)."""
        if kwargs.get("cache_requests") or kwargs.get("rewrite_requests_cache"):
            _tell_once("cache", "--cache_requests: the pack's tasks do not use lm-eval's request cache (its key "
                       "leaves out the --metadata each builds its documents from); their requests are built again")
        kwargs.update(cache_requests=False, rewrite_requests_cache=False)
        self.not_scored, self.not_scored_lengths = {}, {}  # this run's reasons (a task dict may be evaluated again)
        self._check_limit(kwargs.get("limit"), kwargs.get("samples"))
        if _seed_given():
            _tell_once("seed", "--seed does not change the pack's data: its tasks draw from their own --metadata "
                       "seeds (%s, default 0); perplexity sequences take none", ", ".join(_seed_keys()))
        return super().build_all_requests(**self._without_fixed_context(kwargs))

    def _check_limit(self, limit: Optional[int], samples: Any) -> None:
        """Warn, and record (:data:`LIMIT_LEFT_OUT_KEY`), the length x depth cells a ``--limit`` leaves without a
        document: the pack's rows go round the cells (:func:`.lengths.round_robin_order`), so ``--limit 1`` of two
        lengths scored the first alone, without a word."""
        self.left_out = []
        if limit is None or samples:
            return
        cells = [c for c in (self._sweep_cell(d) for d in self.eval_docs) if c is not None]
        kept = set(cells[:int(limit)])
        self.left_out = [c for c in dict.fromkeys(cells) if c not in kept]
        if self.left_out:
            what = "length x depth cells" if any(d.get("depth") is not None for d in self.eval_docs) else "lengths"
            logger.warning("%s: --limit %s leaves %s of its %d %s without a document: %s; give --limit %d or more to "
                           "score each", self.config.task, limit, len(self.left_out), len(set(cells)), what,
                           ", ".join(self.left_out), len(set(cells)), extra=ALIKE_ON_EVERY_RANK)

    def _sweep_cell(self, doc: Dict[str, Any]) -> Optional[str]:
        """The length (and depth) ``doc`` is scored under, as its metrics name it (``1k``, ``1k_d50``); None for a
        task that sweeps no lengths (LongBench-E's ``length`` counts words)."""
        length = doc.get("length")
        label = self._swept_length(doc) or (  # BABILong's rows carry their length's label (its members: no family)
            length if isinstance(length, str) and any(length in f.length_labels for f in TASK_FAMILIES.values())
            else "")
        if not label:
            return None
        return label if doc.get("depth") is None else per_depth(label, doc["depth"])

    def _without_fixed_context(self, kwargs: Dict[str, Any]) -> Dict[str, Any]:
        fixed = fixed_context_of(str(self.config.task))
        given = {"num_fewshot": self.config.num_fewshot, "apply_chat_template": kwargs.get("apply_chat_template"),
                 "system_instruction": kwargs.get("system_instruction")}
        self.ignored = [CONTEXT_OPTIONS[o] for o in fixed if given.get(o)]
        for option in self.ignored:
            logger.warning("%s: %s ignored: the task sizes what the model reads itself (L tokens), and the option "
                           "would put text before it", self.config.task, option)
        if "num_fewshot" in fixed:
            self.set_config(key="num_fewshot", value=0)
        if self.no_chat_template and kwargs.get("apply_chat_template") and "apply_chat_template" not in fixed:
            self.ignored.append(CONTEXT_OPTIONS["apply_chat_template"])
            logger.warning("%s: --apply_chat_template ignored: %s", self.config.task,
                           self.no_chat_template)
            fixed = (*fixed, "apply_chat_template")
        if "apply_chat_template" in fixed:
            kwargs.update(apply_chat_template=False, fewshot_as_multiturn=False, chat_template=None,
                          tokenizer_name="")
        if "system_instruction" in fixed:
            kwargs["system_instruction"] = None
        return kwargs

    # ------------------------------------------------------------------ requests
    def construct_requests(self, doc: Dict[str, Any], ctx: Any, **kwargs: Any):
        reason = reason_of(doc) or self.other_model_refusal(doc, ctx)
        if not reason:
            return super().construct_requests(doc, ctx, **kwargs)
        request_type = "loglikelihood" if self.OUTPUT_TYPE == "multiple_choice" else self.OUTPUT_TYPE
        arguments = (ctx, dict(self.config.generation_kwargs or {})) if request_type == "generate_until" else (ctx,)
        return unsent_request(request_type, doc, arguments, reason, kwargs["metadata"])

    def other_model_refusal(self, doc: Dict[str, Any], ctx: Any) -> str:
        """Why a generation request may not go to the evaluated model, when it is not ``longshort`` and its length
        is known (``""``: send it): no room for the task's generation budget, or a prompt it would cut from the
        left that the task declares may not be cut that way (:meth:`RequestLimits.plan`)."""
        if self.OUTPUT_TYPE != "generate_until" or not isinstance(ctx, str):
            return ""
        limits = self._limits_of_other_model()
        if limits is None:
            return ""
        max_gen = int((self.config.generation_kwargs or {}).get("max_gen_toks", DEFAULT_MAX_GEN_TOKS))
        plan = limits.plan(self._count_tokens(ctx), max_gen, "generate_until", declared_truncation(doc))
        return limits.refuse(self.config.task, plan) if plan.reason else ""

    def _limits_of_other_model(self) -> Optional[RequestLimits]:
        lm = evaluated_model()
        if self._other_limits is None or self._other_limits[0]() is not lm:
            meta = dict(self.config.metadata or {})
            n = model_positions(meta)
            try:
                ref = weakref.ref(lm) if lm is not None else (lambda: None)
            except TypeError:  # a model that takes no weak reference: asked again at each request
                ref = object  # (a new object each call: never the model)
            self._other_limits = (ref, RequestLimits.of_other_model(str(model_of(meta)), n) if n else False)
        return self._other_limits[1] or None

    def _count_tokens(self, text: str) -> int:
        """Prompt tokens with BOS, by the model's tokenizer from the metadata; 0 when it cannot be loaded (then
        only the generation budget is checked)."""
        if self._counter is None:
            try:
                self._counter = tokenizer_from_metadata(dict(self.config.metadata or {}))
            except Exception as err:  # noqa: BLE001  -- any failure only skips the prompt-length check
                logger.info("%s: prompt lengths not checked before sending (no tokenizer: %s)", self.config.task, err)
                self._counter = False
        return 1 + len(self._counter.encode(text)) if self._counter else 0


def _tell_once(what: str, message: str, *args: Any) -> None:
    if what not in _TOLD:
        _TOLD.add(what)
        logger.warning(message, *args, extra=ALIKE_ON_EVERY_RANK)  # from the command line: every process alike


def _seed_given() -> bool:
    """Whether this process's command line gives lm-eval's ``--seed`` (stock ``lm-eval``, and ``longshort-eval``,
    which hands lm-eval its arguments as ``sys.argv``), in any spelling lm-eval's own parser reads as it
    (:func:`~torchtune_longshort.eval.cli_argv.canonical_options`: ``--seed=1``, the abbreviation ``--see 1``)."""
    return option_value(canonical_options(sys.argv[1:]), "--seed") is not None


def _seed_keys() -> List[str]:
    return [k for f in TASK_FAMILIES.values() for k in f.metadata_keys if k.endswith("_seed")]


def sweep_dataset(task: str, lengths: Sequence[int], rows_at: Callable[[int], List[Dict[str, Any]]],
                  placeholder_row: Callable[[int], Dict[str, Any]], fits: Optional[Callable[[int], None]] = None):
    """A length-swept ``custom_dataset``: ``{"test": rows_at(L) for each L}``, each row with an empty ``error``;
    a reason names ``task`` (the pack's), or the task that runs it (:func:`running_task`: a task of one's own).

    A length whose data cannot be had (``TaskDataError`` / ``FileNotFoundError`` from ``rows_at``) gives
    ``placeholder_row(L)`` (a row, or a list: one per depth cell) whose ``error`` holds the reason (scored NaN with
    it), and the other lengths run. A
    length the evaluated model cannot run (``fits(L)`` raises ``TaskDataError``: longer than lm-eval's ``hf``
    model) keeps its rows, each with that reason: never sent, scored NaN, and counted as the samples they are, so
    every model's results count the same samples at every length (the ``longshort`` model, which refuses such
    requests itself, scores the same rows NaN one by one).

    The rows are interleaved across cells (length, and a row's ``depth`` when it has one), round-robin, the order
    inside a cell kept (:func:`.lengths.round_robin_order`), so that lm-eval's ``--limit N`` spreads over them all."""
    import datasets

    task = running_task(task)
    rows: List[Dict[str, Any]] = []
    cells: List[tuple] = []
    for length in lengths:
        where = f"{task} at length {length_label(length)}"
        try:
            got = rows_at(length)
        except (TaskDataError, FileNotFoundError) as err:
            stand_ins = placeholder_row(length)  # one row, or one per depth (each cell of the length then says NaN)
            stand_ins = stand_ins if isinstance(stand_ins, list) else [stand_ins]
            reason = placeholder(where, str(err), stand_ins[0])[0][ERROR_FIELD]  # said once
            rows += [{**row, ERROR_FIELD: reason} for row in stand_ins]
            cells += [(length, row.get("depth") if len(stand_ins) > 1 else None) for row in stand_ins]
            continue
        reason = ""
        try:
            if fits is not None:
                fits(length)
        except TaskDataError as err:
            reason = f"{where}: {err}"
            logger.error("%s -- no score for its %d samples (the results file gives this reason)", reason, len(got))
        rows += [{**row, ERROR_FIELD: reason} for row in got]
        cells += [(length, row.get("depth")) for row in got]
    rows = [rows[i] for i in round_robin_order(cells)]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
