"""task_faults' edges without a model run: hand mutants that test_task_faults and test_task_load_named let through.
A full disk or checkpoint code not trusted ends the run as before (while scoring and while loading a task), a task
whose filters raise keeps the model's responses as its samples' filtered responses, and the wraps are gone from a
task once its evaluate call returns. References: the raised exception object itself, the instances' own responses,
the task class's own methods."""

from __future__ import annotations

import errno
import os

import pytest
from lm_eval.api.instance import Instance

from torchtune_longshort.eval import task_faults
from torchtune_longshort.eval.task_faults import TaskFaults, _loading_named, contained
from torchtune_longshort.rope.checkpoint_code import UntrustedCheckpointCode


def _ending_errors():
    full = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), "/tmp/cache/x.arrow")
    return [full, UntrustedCheckpointCode("my_task's config names code outside torchtune_longshort")]


class _Task:
    """The methods task_faults wraps, of a task of two documents whose filters raise."""

    OUTPUT_TYPE = "loglikelihood"

    def __init__(self):
        self._filters, self._metric_fn_list = [], {"acc": None}
        self._instances = [Instance("loglikelihood", {"i": i}, ("q", " a"), i, ("t", i, 1)) for i in range(2)]
        for i, inst in enumerate(self._instances):
            inst.resps.append((-1.5 - i, False))

    @property
    def instances(self):
        return self._instances

    def build_all_requests(self, **kwargs):
        return None

    def doc_iterator(self, **kwargs):
        yield from enumerate([{"i": 0}, {"i": 1}])

    def apply_filters(self):
        raise RuntimeError("filter broke")

    def process_results(self, doc, results):
        return {"acc": 1.0}

    def doc_to_target(self, doc):
        return " a"


@pytest.mark.parametrize("error", _ending_errors(), ids=["full_disk", "untrusted_code"])
def test_an_error_that_ends_the_run_is_raised_as_it_is_while_scoring_and_loading(error):
    faults = TaskFaults()
    with pytest.raises(type(error)) as got:
        faults.fault("my_task", "scoring doc 0", error)
    assert got.value is error and faults.reasons == {}

    def build(factory, entry):
        raise error

    entry = type("Entry", (), {"name": "my_task"})()
    with pytest.raises(type(error)) as got:
        _loading_named(build)(None, entry)
    assert got.value is error, got.value


def test_a_task_whose_filters_raise_keeps_the_models_responses():
    task, faults = _Task(), TaskFaults()
    faults._wrap_task("t", task)
    out = task.apply_filters()
    assert faults.reasons == {"t": "t: filtering the responses: RuntimeError: filter broke"}
    assert [inst.filtered_resps for inst in out] == [{"none": inst.resps[0]} for inst in task.instances]


def test_the_wraps_are_gone_from_a_task_once_its_evaluate_returns(monkeypatch):
    seen = {}

    def evaluate(lm, task_dict, *args, **kwargs):  # lm-eval's evaluate, as contained() finds it
        task = task_dict["tasks"]["t"]
        seen["wrapped"] = getattr(task.process_results, "__func__", None) is not _Task.process_results
        return {}

    from lm_eval import evaluator

    monkeypatch.setattr(evaluator, "evaluate", evaluate)
    task = _Task()
    with contained():
        evaluator.evaluate(None, {"tasks": {"t": task}})
    assert seen == {"wrapped": True}
    for method in task_faults._WRAPPED:  # the class's own, as before the call
        assert getattr(task, method).__func__ is getattr(_Task, method), method
