"""``longshort-eval`` lets lm-eval index the task pack alone when every task a command names is the pack's
(:mod:`torchtune_longshort.eval.task_index`); any other name keeps lm-eval's whole index. That the pack alone indexes
the same files as the whole index: tests/test_task_names.py. That evaluations through the CLI give the numbers of
lm-eval's ``hf`` model: the end-to-end tests (test_long_ppl, test_passkey, test_wheel_install, ...)."""

from __future__ import annotations

import lm_eval.tasks as lm_tasks
import pytest

from torchtune_longshort.eval.cli_run import lm_eval_argv
from torchtune_longshort.eval.task_index import include_path_covers, pack_only_index, task_names
from torchtune_longshort.eval.tasks import tasks_path

PACK = str(tasks_path())


def test_task_names_read_as_lm_eval_splits_them():
    argv = ["run", "--model", "longshort", "--tasks", "a,b", "c", "--device", "cpu", "-t", "d", "--tasks=e,f"]
    assert task_names(argv) == ["a", "b", "c", "d", "e", "f"]
    assert task_names(["run", "--model", "hf"]) == []


@pytest.mark.parametrize("tasks, covered", [
    ("longshort_ppl,longshort_passkey", True),
    ("longshort_babilong longshort_longbench_e", True),       # groups of the pack
    ("longshort_ppl,hellaswag", False),                       # a built-in: lm-eval's whole index
    ("longshort_pp", False),                                  # a typo: the whole index, for the did-you-mean
    ("/some/task.yaml", False),
])
def test_only_names_all_in_the_pack_skip_lm_evals_builtins(tasks, covered):
    argv = lm_eval_argv(["run", "--model", "longshort", "--model_args", "pretrained=x", "--tasks", *tasks.split()])
    assert include_path_covers(argv, PACK) is covered
    original = lm_tasks.TaskManager
    with pack_only_index(argv, PACK) as on:
        assert on is covered
        assert (lm_tasks.TaskManager is original) is not covered
        if covered:  # what lm-eval's CLI builds (EvaluatorConfig.process_tasks) holds no built-in task
            names = set(lm_tasks.TaskManager(include_path=PACK, metadata={"k": 1}).all_tasks)
            assert "hellaswag" not in names and {"longshort_ppl", "longshort_babilong"} <= names
    assert lm_tasks.TaskManager is original


def test_the_index_is_restored_when_the_evaluation_fails():
    original = lm_tasks.TaskManager
    argv = lm_eval_argv(["run", "--model", "longshort", "--tasks", "longshort_ppl"])
    with pytest.raises(RuntimeError), pack_only_index(argv, PACK):
        raise RuntimeError("the evaluation failed")
    assert lm_tasks.TaskManager is original


# A task of one's own in one's own folder, reusing the pack's functions by their dotted paths (docs/eval.md)
OWN_TASK = """task: my_ppl
class: !function torchtune_longshort.eval.tasks.common.pack_task.PackTask
custom_dataset: !function torchtune_longshort.eval.tasks.ppl.task.long_ppl_dataset
test_split: test
output_type: loglikelihood
doc_to_text: ""
doc_to_target: "{{text}}"
target_delimiter: ""
process_results: !function torchtune_longshort.eval.tasks.ppl.task.process_results
metric_list:
  - metric: ppl
    aggregation: !function torchtune_longshort.eval.tasks.ppl.task.agg_ppl
    higher_is_better: false
metadata:
  version: 1.0
"""


def test_a_folder_of_ones_own_is_indexed_beside_the_pack_not_instead(tmp_path):
    """``--include_path mine`` replaced the pack (lm-eval's CLI takes one folder): ``--tasks my_ppl,longshort_ppl``
    was refused, no task 'longshort_ppl'. Reference: lm-eval's own TaskManager given both folders as a list."""
    (tmp_path / "my_ppl.yaml").write_text(OWN_TASK)
    mine = str(tmp_path)
    argv = lm_eval_argv(["run", "--model", "longshort", "--include_path", mine, "--tasks", "my_ppl,longshort_ppl"])
    want = set(lm_tasks.TaskManager(include_path=[PACK, mine], include_defaults=False).all_tasks)
    assert {"my_ppl", "longshort_ppl"} <= want
    assert include_path_covers(argv, mine)
    original = lm_tasks.TaskManager
    with pack_only_index(argv, mine) as on:
        assert on
        assert set(lm_tasks.TaskManager(include_path=mine, metadata={"k": 1}).all_tasks) == want
    assert lm_tasks.TaskManager is original


def test_a_metadata_key_of_ones_own_task_is_not_refused_as_the_packs(tmp_path):
    """The pack's metadata-key check ran whenever every task was in the included folder, a user's own included:
    a key their own task reads was refused as 'no task of the pack reads them'. Now only a run of the pack's tasks
    alone is checked."""
    from torchtune_longshort.eval.cli_run import check_arguments

    (tmp_path / "my_ppl.yaml").write_text(OWN_TASK)
    run = ["run", "--model", "hf", "--include_path", str(tmp_path), "--metadata", '{"my_corpus_key": 1}', "--tasks"]
    check_arguments(lm_eval_argv([*run, "my_ppl"]))
    with pytest.raises(ValueError, match=r"--metadata key\(s\) \['my_corpus_key'\]: no task of the pack reads them"):
        check_arguments(lm_eval_argv([*run, "longshort_ppl"]))
