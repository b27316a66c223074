"""A task that raises on one process's documents alone (torchrun, accelerate launch) gives its reason in rank 0's
results file, counted as one process counts it (torchtune_longshort.eval.task_faults, TaskFaults.gather).

Walked: `torchrun --nproc_per_node 2 -m torchtune_longshort.eval run --model longshort ... --include_path mytasks
--tasks my_odd,longshort_ppl --limit 4`, my_odd's process_results raising on odd documents (rank 1's share): rank 0's
results file had my_odd NaN with no reason ('my_odd: acc (no reason recorded)'), rank 1 alone said the closing line
and exited 1 at once, and torchrun ended rank 0 (SIGTERM) while it was still writing the results.

Here lm-eval's own ``evaluate`` runs twice in this process, as rank 1 and then as rank 0 of 2: lm-eval's dummy model
with the collectives lm-eval asks of a model answered from the other rank's run (rank 1's objects, recorded, given to
rank 0), and torch.distributed's all_gather_object likewise. The reference is one process over every document.
"""

import copy
import json
import math

import pytest
import torch

ROWS = [{"i": i, "score": s, "text": "a", "answer": "b"} for i, s in enumerate([0.25, 0.5, 1.0, 0.75])]


def _tasks(folder):
    folder.mkdir()
    (folder / "rows.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    (folder / "funcs.py").write_text(
        "def ok(doc, results):\n    return {'acc': doc['score']}\n\n"
        "def odd(doc, results):\n    if doc['i'] % 2:\n        raise RuntimeError(f\"boom on doc {doc['i']}\")\n"
        "    return {'acc': doc['score']}\n")
    for name in ("ok", "odd"):
        (folder / f"my_{name}.yaml").write_text(
            f"task: my_{name}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {folder / 'rows.jsonl'}\n"
            "test_split: test\noutput_type: loglikelihood\ndoc_to_text: \"{{text}}\"\ndoc_to_target: \" {{answer}}\"\n"
            f"process_results: !function funcs.{name}\n"
            "metric_list:\n  - metric: acc\n    aggregation: mean\n    higher_is_better: true\n")


def _evaluate(manager, monkeypatch, rank=None, other=None, tasks=("my_ok", "my_odd")):
    """lm-eval's simple_evaluate under task_faults.contained(): one process (rank None), or rank 0 / 1 of 2, the
    collectives answered from ``other`` (what the other rank sent, in order); returns (results, faults, sent)."""
    import lm_eval
    from lm_eval.models.dummy import DummyLM

    from torchtune_longshort.eval.task_faults import contained

    sent, theirs = [], list(other or [])

    class Rank(DummyLM):
        def all_gather(self, tensor):
            sent.append(tensor)
            them = theirs.pop(0) if theirs else tensor
            return torch.stack([tensor, them] if rank == 0 else [them, tensor])

        def gather_object(self, obj, dst=0):
            sent.append(obj)
            return [obj, theirs.pop(0)] if rank == 0 else None

        def barrier(self):
            pass

    def all_gather_object(out, obj):
        sent.append(copy.deepcopy(obj))  # as torch pickles it
        out[:] = [obj, theirs.pop(0) if theirs else obj] if rank == 0 else [obj, obj]

    lm = Rank()
    if rank is not None:
        lm._rank, lm._world_size = rank, 2
        for name, value in (("is_initialized", lambda: True), ("get_world_size", lambda: 2),
                            ("get_rank", lambda: rank), ("all_gather_object", all_gather_object)):
            monkeypatch.setattr(torch.distributed, name, value)
    with contained() as faults:
        results = lm_eval.simple_evaluate(model=lm, tasks=list(tasks),
                                          task_manager=manager)
    monkeypatch.undo()
    return results, faults, sent


def test_a_fault_on_rank_1_alone_is_in_rank_0s_results_and_said_once(tmp_path, monkeypatch):
    from lm_eval.tasks import TaskManager

    _tasks(tmp_path / "mytasks")
    manager = TaskManager(include_path=str(tmp_path / "mytasks"), include_defaults=False)
    one, one_faults, _ = _evaluate(manager, monkeypatch)
    reason = "my_odd: scoring doc 1: RuntimeError: boom on doc 1"
    assert one["configs"]["my_odd"]["not_scored"] == {reason: len(ROWS)}  # the reference: one process

    none, rank1_faults, rank1_sent = _evaluate(manager, monkeypatch, rank=1)
    assert none is None  # rank 1 writes nothing
    results, faults, _ = _evaluate(manager, monkeypatch, rank=0, other=rank1_sent)
    assert results["results"]["my_ok"]["acc,none"] == pytest.approx(sum(r["score"] for r in ROWS) / len(ROWS))
    assert results["configs"]["my_odd"].get("not_scored") == one["configs"]["my_odd"]["not_scored"]
    assert faults.closing_line() == one_faults.closing_line()  # rank 0 says it and exits 1
    # rank 1 says nothing and exits 0 (its exit 1 had torchrun end rank 0 while it wrote the results)
    assert rank1_faults.closing_line() is None


def test_a_fault_on_rank_1_leaves_no_metric_of_the_task_or_its_group_scored(tmp_path, monkeypatch):
    """Rank 0 aggregates before it learns of rank 1's fault: a metric the fault's NaN does not name kept the other
    documents' mean (walked here: my_odd's f1, which its process_results returns beside metric_list's acc, 0.5833
    over 3 of 4 documents, its stderr and its group's a number; one process: NaN, 'N/A')."""
    from lm_eval.tasks import TaskManager

    _tasks(tmp_path / "mytasks")
    funcs = tmp_path / "mytasks" / "funcs.py"
    funcs.write_text(funcs.read_text().replace("if doc['i'] % 2:", "if doc['i'] == 3:")  # rank 1's second
                     .replace("return {'acc': doc['score']}", "return {'acc': doc['score'], 'f1': doc['score']}"))
    (tmp_path / "mytasks" / "my_group.yaml").write_text(
        "group: my_group\ntask:\n  - my_ok\n  - my_odd\naggregate_metric_list:\n  - metric: f1\n"
        "    weight_by_size: true\n")
    manager = TaskManager(include_path=str(tmp_path / "mytasks"), include_defaults=False)
    one, _, _ = _evaluate(manager, monkeypatch, tasks=["my_group"])  # the reference: one process
    _, _, rank1_sent = _evaluate(manager, monkeypatch, rank=1, tasks=["my_group"])
    results, _, _ = _evaluate(manager, monkeypatch, rank=0, other=rank1_sent, tasks=["my_group"])
    for name in ("my_odd", "my_group", "my_ok"):
        assert json.dumps(results["results"][name]) == json.dumps(one["results"][name])  # NaN as NaN
    assert json.dumps(results["groups"]) == json.dumps(one["groups"])
    assert math.isnan(one["results"]["my_odd"]["f1,none"]) and math.isnan(one["results"]["my_group"]["f1,none"])
    assert one["results"]["my_odd"]["f1_stderr,none"] == "N/A"


def test_a_two_filter_task_raising_on_rank_1_is_counted_as_one_process_counts_it(tmp_path, monkeypatch):
    """A task with two filters raising on rank 1's documents: lm-eval's second filter pass was given the stand-in
    document 0, which rank 1 does not hold (walked here: rank 1 ended in lm-eval's 'IndexError: list index out of
    range' at requests[0].doc, no results); each process's share is counted once, not once per filter."""
    from lm_eval.tasks import TaskManager

    _tasks(tmp_path / "mytasks")
    odd = tmp_path / "mytasks" / "my_odd.yaml"
    odd.write_text(odd.read_text() + "filter_list:\n" + "".join(
        f"  - name: {name}\n    filter:\n      - function: take_first\n" for name in ("a", "b")))
    manager = TaskManager(include_path=str(tmp_path / "mytasks"), include_defaults=False)
    one, _, _ = _evaluate(manager, monkeypatch)  # the reference: one process
    _, _, rank1_sent = _evaluate(manager, monkeypatch, rank=1)
    results, _, _ = _evaluate(manager, monkeypatch, rank=0, other=rank1_sent)
    assert one["configs"]["my_odd"]["not_scored"] == {"my_odd: scoring doc 1: RuntimeError: boom on doc 1": len(ROWS)}
    assert results["configs"]["my_odd"]["not_scored"] == one["configs"]["my_odd"]["not_scored"]
