"""What task_faults records for a task that raised, without a model run: its aggregation has the keys and the sample
count lm-eval's own ``_compute_task_aggregations`` gives the same raw metrics, each value NaN and each stderr lm-eval's
"N/A"; its reason is its first fault, worded by the exception's first line as Python's ``traceback`` words it; its
``not_scored`` count is the documents it had, else lm-eval's ``effective`` count, else 1. The mutant ``"N/A"`` -> NaN
survived test_task_faults.py, test_task_faults_units.py, test_task_faults_ranks.py and test_task_faults_twice.py."""

from __future__ import annotations

import math
import traceback
from types import SimpleNamespace

from lm_eval.api.metrics import mean
from lm_eval.evaluator_utils import _compute_task_aggregations

from torchtune_longshort.eval.task_faults import TaskFaults
from torchtune_longshort.eval.tasks.common.unavailable import NOT_SCORED_KEY


def test_a_faulted_tasks_aggregation_has_lm_evals_keys_and_count_its_values_nan():
    task = SimpleNamespace(task_name="t", aggregation=lambda: {"acc": mean, "ppl_4k": mean})
    raw = {("acc", "none"): [1.0, 0.0, 1.0], ("ppl_4k", "strict"): [2.0]}
    want, want_n = _compute_task_aggregations(task, raw, bootstrap_iters=0)  # lm-eval's: no stderr -> "N/A"

    def boom(*args, **kwargs):
        raise RuntimeError("aggregation broke")

    faults = TaskFaults()
    got, n = faults._aggregations(boom)(task, raw)
    assert faults.reasons == {"t": "t: aggregation: RuntimeError: aggregation broke"}
    assert sorted(got) == sorted(want) and n == want_n == 3
    for key, value in got.items():
        if "_stderr," in key:
            assert value == want[key] == "N/A", key
        else:
            assert isinstance(value, float) and math.isnan(value), key
    assert faults._aggregations(lambda *a, **k: (want, want_n))(SimpleNamespace(task_name="u"), raw) == (want, want_n)


def _python_first_line(error):
    return "".join(traceback.format_exception_only(type(error), error)).splitlines()[0]


def test_a_tasks_reason_is_its_first_fault_in_the_exceptions_first_line():
    faults = TaskFaults()
    first = RuntimeError("boom on doc 3\nsecond line of the message")
    faults.fault("t", "scoring doc 3", first, 3)
    faults.fault("t", "aggregation", ValueError("later"))
    shown = _python_first_line(first)
    assert shown == "RuntimeError: boom on doc 3"
    assert faults.reasons == {"t": f"t: scoring doc 3: {shown}"}
    bare = KeyError()
    faults.fault("u", "building requests", bare)
    assert faults.reasons["u"] == f"u: building requests: {_python_first_line(bare)}"


def test_each_reason_counts_the_documents_it_had_else_lm_evals_effective_else_one():
    faults = TaskFaults()
    for task in ("a", "b", "c"):
        faults.fault(task, "building requests", RuntimeError(task))
    faults.documents["a"] = 5
    results = {"results": {}, "n-samples": {"a": {"effective": 2}, "b": {"original": 9, "effective": 7}}}
    faults.add_reasons(results)
    assert {t: c[NOT_SCORED_KEY] for t, c in results["configs"].items()} == {
        "a": {"a: building requests: RuntimeError: a": 5}, "b": {"b: building requests: RuntimeError: b": 7},
        "c": {"c: building requests: RuntimeError: c": 1}}
