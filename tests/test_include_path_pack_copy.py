"""``longshort-eval run --include_path <another install's task folder>`` (a checkout's torchtune_longshort/eval/tasks
given to a wheel's command) indexes a second copy of every pack task name, and lm-eval runs that folder's YAMLs
(the results' config_source names it), where only an info line said the folder was 'indexed beside the installed
task pack's', then lm-eval's 29 'Task ... overrides existing task ...' lines. One warning line now names both folders
and the one that runs. lm-eval's own index of the two folders, in the order the run includes them, is the reference
for which runs."""

from __future__ import annotations

import logging
import shutil

import pytest

pytest.importorskip("lm_eval")

from lm_eval import tasks as lm_tasks  # noqa: E402

from torchtune_longshort.eval.cli_run import lm_eval_argv  # noqa: E402
from torchtune_longshort.eval.task_index import included_folders  # noqa: E402
from torchtune_longshort.eval.tasks import tasks_path  # noqa: E402


def _said(caplog, folder, level):
    caplog.clear()
    with caplog.at_level(logging.INFO):
        lm_eval_argv(["run", "--tasks", "longshort_ppl", "--model", "hf", "--include_path", str(folder)])
    return [r.getMessage() for r in caplog.records if r.levelno == level and "--include_path" in r.getMessage()]


def test_another_copy_of_the_pack_is_said_in_one_warning_naming_the_folder_that_runs(tmp_path, caplog):
    pack = tasks_path()
    copy = tmp_path / "other_install" / "tasks"
    shutil.copytree(pack, copy, ignore=shutil.ignore_patterns("__pycache__"))
    index = lm_tasks.TaskManager(include_path=included_folders(str(copy)), include_defaults=False).task_index
    runs = index["longshort_ppl"].yaml_path
    assert runs.is_relative_to(copy)  # the reference: lm-eval's index takes the later folder's YAML

    warned = _said(caplog, copy, logging.WARNING)
    assert len(warned) == 1, warned
    assert warned[0].startswith(f"--include_path {copy} is another copy of the task pack (every task name of the "
                                f"installed pack {pack} is there too): lm-eval runs {copy}'s YAMLs for longshort_ppl")

    own = tmp_path / "mine"  # a folder of one's own overriding one pack task: said alike, with its name
    own.mkdir()
    shutil.copy(pack / "ppl" / "longshort_ppl.yaml", own / "longshort_ppl.yaml")
    warned = _said(caplog, own, logging.WARNING)
    assert len(warned) == 1 and f"holds 1 task name of the installed pack {pack} (longshort_ppl)" in warned[0]

    own = tmp_path / "mine2"  # no name in common: the info line as before, no warning
    own.mkdir()
    (own / "my_task.yaml").write_text("task: my_task\ndataset_path: json\noutput_type: loglikelihood\n")
    assert _said(caplog, own, logging.WARNING) == []
    assert len(_said(caplog, own, logging.INFO)) == 1
