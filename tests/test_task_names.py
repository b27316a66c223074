"""The task pack shadows nothing of lm-eval's: every task, group and tag name it defines starts with the pack's prefix
and is checked against the built-ins of the installed lm-eval (``TaskManager()``); the pack reuses no built-in
task by name (its LongBench-E and BABILong tasks start from lm-eval's files under names of their own); loading the
pack logs no "overrides existing task"; the registry names exactly the pack's top-level tasks; the pack is package
data, found by ``longshort-eval`` without ``--include_path``; and every hint names the command that has the model."""

from __future__ import annotations

import logging
import re
from pathlib import Path

import pytest
import yaml

from torchtune_longshort.eval.tasks import PREFIX, TASK_FAMILIES, family_of, task_results, tasks_path

REPO = Path(__file__).resolve().parents[1]
TASKS = tasks_path()


class _Loader(yaml.SafeLoader):
    pass


_Loader.add_multi_constructor("!", lambda loader, suffix, node: None)  # !function tags: names only


@pytest.fixture(scope="module")
def _builtins_parsed_once():
    """The two whole indexes below (without and with the pack) parse each of lm-eval's ~14,000 built-in YAMLs once,
    not twice (~11 s each on 2 cores): lm-eval's own ``load_yaml``, its answer (or its error) kept per built-in file
    and arguments. The pack's files are parsed afresh every time, so the pack's entries are compared as parsed."""
    from lm_eval.tasks import _index

    load, memo = _index.load_yaml, {}

    def once(path, **kwargs):
        if TASKS in Path(path).resolve().parents:
            return load(path, **kwargs)
        key = (str(path), tuple(sorted(kwargs.items())))
        if key not in memo:
            try:
                memo[key] = (load(path, **kwargs), None)
            except Exception as err:  # lm-eval skips a file that fails to parse: so does the second index
                memo[key] = (None, err)
        cfg, err = memo[key]
        if err is not None:
            raise err
        return cfg

    mp = pytest.MonkeyPatch()
    mp.setattr(_index, "load_yaml", once)
    yield
    mp.undo()


@pytest.fixture(scope="module")
def builtin(_builtins_parsed_once):
    from lm_eval.tasks import TaskManager

    return set(TaskManager().all_tasks)


@pytest.fixture(scope="module")
def full(_builtins_parsed_once):
    """lm-eval's index with the pack included (as its CLI builds it), and the warnings logged while it was built."""
    from lm_eval.tasks import TaskManager

    class Keep(logging.Handler):
        def __init__(self):
            super().__init__(logging.WARNING)
            self.lines = []

        def emit(self, record):
            self.lines.append(record.getMessage())

    keep, root = Keep(), logging.getLogger()
    root.addHandler(keep)
    try:
        manager = TaskManager(include_path=str(TASKS))
    finally:
        root.removeHandler(keep)
    return manager, keep.lines


@pytest.fixture(scope="module")
def ours():
    from lm_eval.tasks import TaskManager

    return TaskManager(include_path=str(TASKS), include_defaults=False)


def _yaml_names():
    """``(defined, referenced)`` task / group / tag names, read from the YAML text itself."""
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
    return defined, referenced


def test_pack_defines_no_builtin_name(builtin, ours):
    names = set(ours.all_tasks)
    assert {f.task for f in TASK_FAMILIES.values()} <= names
    assert len(names) >= 5 + 13 + 6 + 5
    assert sorted(n for n in names if not n.startswith(PREFIX)) == []
    # lengths come from --metadata (max_seq_lengths), not from one task per length
    assert not [n for n in names if re.match(rf"{PREFIX}(ppl|passkey|misalignment)_\d", n)]
    assert sorted(names & builtin) == []


def test_names_read_from_the_yaml_files_are_not_builtin(builtin):
    """The same check from the YAML text itself (not lm-eval's index of it), so a file lm-eval skipped counts; a
    group's members are the pack's own tasks, never a built-in reused by name."""
    defined, referenced = _yaml_names()
    assert len(defined) >= 29 and all(n.startswith(PREFIX) for n in defined), sorted(defined)
    assert sorted(defined & builtin) == []
    assert referenced <= defined, sorted(referenced - defined)


def test_loading_the_pack_overrides_nothing(full):
    assert not [line for line in full[1] if "overrides existing task" in line]


def test_the_pack_alone_indexes_the_same_files_as_the_whole_index(full, ours):
    """``longshort-eval`` indexes the pack alone when every task named is the pack's
    (:mod:`torchtune_longshort.eval.task_index`): each of the pack's names points at the same YAML file, of the same
    kind and parsed config, as in lm-eval's whole index with the pack included."""
    whole, alone = full[0].task_index, ours.task_index
    assert len(whole) > 10 * len(alone) and set(alone) <= set(whole)
    assert {n: (str(e.yaml_path), e.kind, e.cfg) for n, e in alone.items()} == {
        n: (str(whole[n].yaml_path), whole[n].kind, whole[n].cfg) for n in alone}


def test_registry_reads_former_names():
    assert family_of("long_ppl") == family_of("longshort_ppl") == "ppl"
    old = {"long_ppl": {"ppl_4k": 9.0}, "babilong_longshort": {"acc": 0.5}}
    assert task_results(old, "longshort_ppl") == {"ppl_4k": 9.0}
    assert task_results(old, "longshort_babilong") == {"acc": 0.5}
    assert task_results(old, "hellaswag") == {}


def test_generated_files_are_current():
    """The generated LongBench-E / BABILong files are what the generator writes (that the wheel ships every file of
    the pack: tests/test_wheel_install.py)."""
    from torchtune_longshort.eval.tasks.generate import stale_files

    assert stale_files() == {}
    assert not (REPO / "evals").exists()


def test_longshort_eval_adds_the_pack_and_a_device_that_exists(tmp_path):
    import torch

    from torchtune_longshort.eval.cli_run import lm_eval_argv

    argv = lm_eval_argv(["run", "--model", "hf", "--tasks", "longshort_ppl"])
    assert argv[argv.index("--include_path") + 1] == str(TASKS)
    assert argv[argv.index("--device") + 1] == ("cuda" if torch.cuda.is_available() else "cpu")
    assert lm_eval_argv(["ls", "tasks"])[-2:] == ["--include_path", str(TASKS)]
    mine = lm_eval_argv(["run", "--include_path", str(tmp_path), "--device", "cpu"])  # a folder of the user's tasks
    assert mine.count("--include_path") == 1 and mine[mine.index("--device") + 1] == "cpu"
    if not torch.cuda.is_available():  # a device the machine lacks is refused for every model, hf included
        with pytest.raises(ValueError, match=r"--device='cuda:1': CUDA is not available on this machine; pass "
                                             r"--device cpu"):
            lm_eval_argv(["run", "--model", "hf", "--device", "cuda:1"])


def test_hints_name_the_command_that_has_the_model():
    """Stock ``lm-eval`` has no ``longshort`` model: no text of the package or README sends a user there."""
    stock = re.compile(r"(?<![\w-])lm[-_]eval\s+(run\s+)?--model\s+longshort")
    texts = [REPO / "README.md", *(REPO / "docs").glob("eval*.md"), REPO / "docs/longbench_babilong.md",
             *(REPO / "torchtune_longshort").rglob("*.py")]
    bad = [f"{p}: {m.group(0)}" for p in texts for m in stock.finditer(p.read_text())]
    assert bad == []
