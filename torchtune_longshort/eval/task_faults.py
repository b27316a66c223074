"""One task that raises does not sink a ``longshort-eval`` run: its metrics are NaN, the other tasks are scored.

lm-eval 0.4.13 runs every task's requests, then scores each task's documents and aggregates them in one loop
(``lm_eval.evaluator.evaluate``); an exception in any task there (a task of one's own whose ``process_results``
raises on one document, a bug in one of the pack's tasks) ended the run with a traceback and no results file, the
scores of the tasks already computed lost. :func:`contained` wraps, for the tasks of each ``evaluate`` call, only
the points where a task's own code runs (lm-eval's loop is left as it is):

* **building requests**: the task's ``build_all_requests`` (its documents, prompts and ``construct_requests``);
* **scoring doc N**: the task's ``process_results`` of document N (and, with ``--log_samples``, its
  ``doc_to_target``), and its filters;
* **aggregation**: lm-eval's aggregation of the task's metrics (``evaluator_utils._compute_task_aggregations``).

The first exception of a task makes it *faulted*: every metric it reports is NaN (one whose first document raised
reports its ``metric_list`` names), nothing more of it is asked, one line names it (``<task>: scoring doc 1:
RuntimeError: boom``; the traceback too when ``LONGSHORT_TRACEBACK`` is set), and that line is its reason in the
results file, under ``configs.<task>.not_scored`` (the pack's place for unscored things). ``longshort-eval`` then
writes the results file and exits 1 (:data:`EXIT_STATUS`). A refusal the run must stop for (checkpoint code not
trusted) and a full disk still end the run as before. Stock ``lm_eval`` is not wrapped.

Under several processes (``torchrun``, ``accelerate launch``: each scores every N-th document) a task may raise on
one process's documents alone: the processes share their faults after lm-eval's ``evaluate``
(:meth:`TaskFaults.gather`), so rank 0's results file gives the reason one process would have met first, counted
over every document, and rank 0 alone says the closing line and exits 1; the others exit 0 (one exiting 1 had
torchrun end rank 0 while it wrote the results).
"""

from __future__ import annotations

import contextlib
import logging
import math
from typing import Any, Dict, Iterator, List, Optional, Tuple

from torchtune_longshort.disk_space import is_out_of_space
from torchtune_longshort.eval.tasks.common.unavailable import NOT_SCORED_KEY, RefusedText
from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import show_traceback
from torchtune_longshort.rope.checkpoint_code import UntrustedCheckpointCode

logger = logging.getLogger(__name__)

# longshort-eval's exit status when a task raised (its metrics NaN, the others scored and written); a refusal is 2
EXIT_STATUS = 1
_WRAPPED = ("build_all_requests", "doc_iterator", "apply_filters", "process_results", "doc_to_target")
_STAGES = ("building requests", "filtering the responses", "scoring", "aggregation")  # lm-eval's order


def _first_line(error: BaseException) -> str:
    text = str(error).strip().splitlines()
    return f"{type(error).__name__}: {text[0]}" if text else type(error).__name__


def _passes_through(error: BaseException) -> bool:
    """An error that ends the run as before: a refusal of code the run was not told to trust, a full disk."""
    return isinstance(error, UntrustedCheckpointCode) or is_out_of_space(error)


class TaskFaults:
    """The tasks that raised in this run: ``{task: reason}`` (see the module docstring)."""

    def __init__(self) -> None:
        self.reasons: Dict[str, str] = {}
        self.documents: Dict[str, int] = {}  # a task that raised building its requests: the documents it had
        self.first: Dict[str, Tuple[int, int]] = {}  # where it raised: (stage, document), the first this process met
        self.shares: Dict[str, set] = {}  # the documents each task scored in this process (their ids)
        self.rank = 0  # this process's among several (rank 0 writes the results and says the closing line)
        self.earlier: Dict[str, str] = {}  # the faults of this run's earlier evaluate calls (the closing line's)

    def begin(self) -> None:
        """A new ``evaluate`` call (a Python caller's second ``simple_evaluate`` in one :func:`contained`): its tasks
        run afresh, a task that raised in an earlier call among them; the earlier faults stay in the closing line."""
        self.earlier.update(self.reasons)
        self.reasons, self.documents, self.first, self.shares = {}, {}, {}, {}

    def fault(self, task: str, stage: str, error: BaseException, doc: int = 0) -> None:
        if _passes_through(error):
            raise error
        if task in self.reasons:
            return
        self.reasons[task] = f"{task}: {stage}: {_first_line(error)}"
        self.first[task] = (_STAGES.index(stage.split(" doc ")[0]), doc)
        logger.error("%s -- the task's metrics are NaN and the run goes on without it (the results file gives this "
                     "reason)", self.reasons[task], exc_info=error if show_traceback() else None)

    def closing_line(self, exit_status: bool = True) -> Optional[str]:
        """The run's last line when a task raised (None when none did, and in a process other than rank 0);
        ``exit_status``: naming longshort-eval's (a Python caller's run has none)."""
        every = {**self.earlier, **self.reasons}
        if not every or self.rank != 0:
            return None
        return (f"{counted(len(every), 'task')} raised and {'is' if len(every) == 1 else 'are'} NaN: "
                f"{'; '.join(every.values())}; the run went on without them: the other tasks' scores and these reasons "
                "are in its results"
                + (f" (exit status {EXIT_STATUS})" if exit_status else ""))

    # ------------------------------------------------------------------ the wraps
    def _wrap_task(self, name: str, task: Any) -> None:
        """Put this run's wraps on ``task``'s own methods (instance attributes, taken off by :meth:`_unwrap`)."""
        own = {m: getattr(task, m) for m in _WRAPPED}
        at: Dict[str, Any] = {"doc": 0, "building": False, "stand_in": False}

        def build_all_requests(**kwargs):
            at["building"] = True
            try:
                return own["build_all_requests"](**kwargs)
            except Exception as e:
                self.fault(name, "building requests", e, at["doc"])
                task._instances, at["stand_in"] = [_stand_in(task, name, self.reasons[name])], True
                with contextlib.suppress(Exception):  # the documents it would have scored (a stand-in is one)
                    self.documents[name] = sum(1 for _ in own["doc_iterator"](**{
                        k: kwargs.get(k) for k in ("rank", "limit", "world_size", "samples") if k in kwargs}))
            finally:
                at["building"] = False

        def doc_iterator(**kwargs) -> Iterator:
            if at["stand_in"]:  # the stand-in request's one document (a task raising later: its own, each NaN)
                yield 0, {}
                return
            for doc_id, doc in own["doc_iterator"](**kwargs):
                at["doc"] = doc_id
                if not at["building"]:  # lm-eval's scoring loop (once per filter): this process's share
                    self.shares.setdefault(name, set()).add(doc_id)
                yield doc_id, doc

        def apply_filters():
            if name not in self.reasons:
                try:
                    return own["apply_filters"]()
                except Exception as e:
                    self.fault(name, "filtering the responses", e)
            for inst in task.instances:
                for key in [f.name for f in getattr(task, "_filters", [])] or ["none"]:
                    inst.filtered_resps[key] = inst.resps[0] if inst.resps else None
            return task.instances

        def process_results(doc, results):
            if name not in self.reasons:
                try:
                    return own["process_results"](doc, results)
                except Exception as e:
                    self.fault(name, f"scoring doc {at['doc']}", e, at["doc"])
            return {metric: math.nan for metric in getattr(task, "_metric_fn_list", {}) or ("score",)}

        def doc_to_target(doc, *args, **kwargs):  # a few-shot context passes the fewshot config's doc_to_target
            try:
                return own["doc_to_target"](doc, *args, **kwargs)
            except Exception as e:
                if at["building"]:  # building's own wrap says so
                    raise
                if name not in self.reasons:
                    self.fault(name, f"scoring doc {at['doc']}", e, at["doc"])
                return ""

        for method, wrap in zip(_WRAPPED, (build_all_requests, doc_iterator, apply_filters, process_results,
                                           doc_to_target)):
            setattr(task, method, wrap)

    @staticmethod
    def _unwrap(tasks: List[Any]) -> None:
        for task in tasks:
            for method in _WRAPPED:
                task.__dict__.pop(method, None)

    def _aggregations(self, aggregate):
        """lm-eval's aggregation of one task's metrics, a faulted task's NaN (stderr "N/A")."""
        def wrapped(task, raw_metrics, *args, **kwargs):
            name = str(getattr(task, "task_name", ""))
            if name not in self.reasons:
                try:
                    return aggregate(task, raw_metrics, *args, **kwargs)
                except Exception as e:
                    self.fault(name, "aggregation", e)
            out: Dict[str, Any] = {}
            for metric, filter_key in raw_metrics:
                out[f"{metric},{filter_key}"], out[f"{metric}_stderr,{filter_key}"] = math.nan, "N/A"
            return out, max((len(v) for v in raw_metrics.values()), default=0)
        return wrapped

    def gather(self) -> None:
        """Every process's faults on every process (``torchrun``, ``accelerate launch``; a collective: each process
        calls it after lm-eval's ``evaluate``). A task may raise on one process's documents alone (every N-th is
        its), and rank 0 writes the results: each faulted task's reason is the one a single process would have
        met first (the earliest stage, then the lowest document), counted over every process's share."""
        import torch.distributed as dist

        if not (dist.is_available() and dist.is_initialized()) or dist.get_world_size() == 1:
            return
        self.rank = dist.get_rank()
        mine = {"reasons": self.reasons, "first": self.first, "documents": self.documents,
                "shares": {task: len(ids) for task, ids in self.shares.items()}}
        every: List[Any] = [None] * dist.get_world_size()
        dist.all_gather_object(every, mine)
        self.merge(every)

    def merge(self, every: List[Dict[str, Dict[str, Any]]]) -> None:
        """The faults of every process (:meth:`gather`'s, in rank order) as this process's."""
        for task in dict.fromkeys(task for one in every for task in one["reasons"]):  # in rank order
            met = min((tuple(one["first"][task]), rank) for rank, one in enumerate(every) if task in one["reasons"])
            self.reasons[task], self.first[task] = every[met[1]]["reasons"][task], met[0]
            self.documents[task] = sum(one["documents"].get(task, one["shares"].get(task, 0)) for one in every)

    def add_reasons(self, results: Any) -> None:
        """Each faulted task's reason in ``results`` (``evaluate``'s) under ``configs.<task>.not_scored``
        (``{reason: documents}``)."""
        if not isinstance(results, dict):
            return
        self._nan_metrics(results)
        configs = results.setdefault("configs", {})
        for task, reason in self.reasons.items():
            count = self.documents.get(task) or ((results.get("n-samples") or {}).get(task) or {}).get("effective") or 1
            entry = configs.setdefault(task, {})
            entry.setdefault(NOT_SCORED_KEY, {})[reason] = count


    def _nan_metrics(self, results: Dict[str, Any]) -> None:
        """Each faulted task's metrics in ``results`` NaN (stderr "N/A"), and those of a group holding it, as one
        process aggregates them: under several processes rank 0 aggregates before it learns of another's fault
        (:meth:`gather` follows lm-eval's last collective), and a metric the fault's NaN does not name (one
        ``process_results`` returns beyond ``metric_list``, a per-length ``acc_4k``) kept the other documents' mean."""
        tables = [t for t in (results.get("results"), results.get("groups")) if isinstance(t, dict)]
        subtasks = results.get("group_subtasks") or {}

        def holds(group: str, task: str, seen: frozenset = frozenset()) -> bool:
            return any(s == task or (s not in seen and holds(s, task, seen | {group}))
                       for s in subtasks.get(group, ()))

        for task in self.reasons:
            keys = [k for k in ((results.get("results") or {}).get(task) or {}) if "," in k]
            for name in [task, *(g for g in subtasks if holds(g, task))]:
                for table in tables:
                    entry = table.get(name)
                    for key in (k for k in keys if isinstance(entry, dict) and k in entry):
                        entry[key] = "N/A" if "_stderr," in key else math.nan


def _stand_in(task: Any, name: str, reason: str):
    """One request lm-eval never sends (``repeats`` 0), standing for a task that raised while building its own."""
    from lm_eval.api.instance import Instance

    output = getattr(task, "OUTPUT_TYPE", None)
    request_type = "loglikelihood" if output in (None, "multiple_choice") else output
    inst = Instance(request_type=request_type, doc={}, arguments=("", ""), idx=0, metadata=(name, 0, 0))
    inst.resps.append(RefusedText(reason))
    return inst


def _loading_named(build):
    """lm-eval's build of one task (its config, documents and few-shot documents, before any task runs): an error
    whose words do not name the task is refused naming it, in one line, as a fault later in the run is worded
    (``my_load: loading the task: ValueError: bad docs``); lm-eval built each task before the model saw any."""
    def wrapped(factory, entry, *args, **kwargs):
        try:
            return build(factory, entry, *args, **kwargs)
        except Exception as e:
            name = str(getattr(entry, "name", "") or "")
            if _passes_through(e) or not name or name in str(e):
                raise
            raise ValueError(f"{name}: loading the task: {_first_line(e)} (no task ran: lm-eval builds every task "
                             f"first; fix it, or leave {name} out of --tasks)") from e
    return wrapped


@contextlib.contextmanager
def contained() -> Iterator[TaskFaults]:
    """While open, every lm-eval ``evaluate`` call keeps a task that raises from sinking the run (module doc)."""
    # deferred: lm_eval (imported by longshort-eval's run already)
    from lm_eval import evaluator, evaluator_utils
    from lm_eval.tasks._factory import TaskFactory

    faults = TaskFaults()
    evaluate, aggregate = evaluator.evaluate, evaluator_utils._compute_task_aggregations
    build = TaskFactory._build_task

    def evaluate_contained(lm, task_dict, *args, **kwargs):
        faults.begin()
        tasks = dict(task_dict.get("tasks") or {}) if isinstance(task_dict, dict) else {}
        for name, task in tasks.items():
            faults._wrap_task(name, task)
        try:
            results = evaluate(lm, task_dict, *args, **kwargs)
        finally:
            faults._unwrap(list(tasks.values()))
        faults.gather()
        faults.add_reasons(results)
        return results

    evaluator.evaluate, evaluator_utils._compute_task_aggregations = evaluate_contained, faults._aggregations(aggregate)
    TaskFactory._build_task = _loading_named(build)
    try:
        yield faults
    finally:
        evaluator.evaluate, evaluator_utils._compute_task_aggregations = evaluate, aggregate
        TaskFactory._build_task = build
