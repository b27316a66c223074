"""The task pack shadows nothing of lm-eval's: every task, group and tag name it defines is checked against the
built-ins of the installed lm-eval (``TaskManager()``), and loading the pack logs no "overrides existing task"."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[1]
TASKS = REPO / "evals/tasks"

# lm-eval's own tasks that our groups take over and re-score (BABILong's official answer comparison, LongBench's
# official scorer): lm-eval 0.4.13 keeps a referenced task's name, so these keep lm-eval's names inside our
# groups (babilong_longshort, longbench_e_full_*). Nothing else of ours may carry a built-in name.
REUSED_BUILTINS = re.compile(r"^(babilong_qa[1-5]|longbench_[a-z0-9_-]+_e)$")


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)  # !function tags: names only


@pytest.fixture(scope="module")
def builtin():
    from lm_eval.tasks import TaskManager

    return set(TaskManager().all_tasks)


@pytest.fixture(scope="module")
def ours():
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS), include_defaults=False)


def test_pack_defines_no_builtin_name(builtin, ours):
    names = set(ours.all_tasks)
    assert {"longshort_passkey", "long_ppl", "misalignment", "babilong_longshort", "longbench_e_full"} <= names
    # lengths come from --metadata (max_seq_lengths), not from one task per length
    assert not [n for n in names if re.match(r"(long_ppl|longshort_passkey|misalignment|passkey)_\d", n)]
    assert sorted(names & builtin) == []


def test_names_read_from_the_yaml_files_are_not_builtin(builtin):
    """The same check from the YAML text itself (not lm-eval's index of it), so a file lm-eval skipped counts."""
    defined, referenced = set(), set()
    for path in TASKS.rglob("*.yaml"):
        cfg = yaml.load(path.read_text(), Loader=_Loader) or {}
        for key in ("task", "group"):
            if isinstance(cfg.get(key), str):
                defined.add(cfg[key])
        tags = cfg.get("tag") or []
        defined |= {tags} if isinstance(tags, str) else set(tags)
        if isinstance(cfg.get("task"), list):
            referenced |= {t if isinstance(t, str) else t.get("task") or t.get("group") for t in cfg["task"]}
    assert len(defined) >= 11
    assert sorted(defined & builtin) == []
    reused = {n for n in referenced - defined if n in builtin}
    assert reused and all(REUSED_BUILTINS.match(n) for n in reused), sorted(reused)


def test_loading_the_pack_overrides_nothing(caplog):
    from lm_eval.tasks import TaskManager

    with caplog.at_level(logging.WARNING):
        TaskManager(include_path=str(TASKS))
    assert not [r for r in caplog.records if "overrides existing task" in r.getMessage()]


