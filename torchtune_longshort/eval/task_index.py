"""lm-eval's task index of a ``longshort-eval`` run: the task pack and a user's own ``--include_path`` folder beside
it, and those folders alone when every task a command names is in them.

lm-eval 0.4.13's ``TaskManager`` takes a list of folders, but its CLI's ``--include_path`` takes one: a folder of
one's own (a task reusing the pack's functions by their dotted ``!function`` paths) replaced the pack, so its tasks
and the pack's could not run in one command. ``longshort-eval`` indexes both (the user's folder last: a task of the
same name there wins, as lm-eval lets an include path override its built-in tasks).

lm-eval 0.4.13's CLI builds ``TaskManager(include_path=...)``, which indexes its ~14,000 built-in task YAMLs before
it looks a name up: 10-20 s on this project's 2-core CPU, against ~0.1 s for the task pack's folder alone. When every
name after ``--tasks`` is a task or group of the included folder, ``longshort-eval`` (and :func:`cli_run.run_cli`)
let the CLI build its index with ``include_defaults=False``; any other name (a built-in task, a YAML path, a glob)
keeps lm-eval's whole index, exactly as before. Results are the same either way: the pack's tasks are read from the
same YAML files.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from pathlib import Path
from typing import Any, FrozenSet, Iterator, List, Sequence

from lm_eval import tasks as lm_tasks

from torchtune_longshort.eval.tasks import tasks_path
from torchtune_longshort.plural import counted

logger = logging.getLogger(__name__)


def included_folders(include_path: str) -> List[str]:
    """The folders a run indexes for ``--include_path include_path``: the task pack, then the given folder when it
    is another."""
    pack = str(tasks_path())
    if not include_path or Path(include_path).expanduser().resolve() == Path(pack):
        return [pack]
    return [pack, include_path]


def task_names(argv: Sequence[str]) -> List[str]:
    """The names after ``--tasks`` / ``-t`` (space- or comma-separated, lm-eval's ``SplitArgs``), in order."""
    names: List[str] = []
    i = 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("--tasks="):
            names += a.split("=", 1)[1].split(",")
        elif a in ("--tasks", "-t"):
            while i + 1 < len(argv) and not argv[i + 1].startswith("-"):
                i += 1
                names += argv[i].split(",")
        i += 1
    return [n.strip() for n in names if n.strip()]


def include_path_covers(argv: Sequence[str], include_path: str) -> bool:
    """True when the command names tasks and every one is a task or group of the folders ``include_path`` stands for
    (:func:`included_folders`)."""
    names = task_names(argv)
    if not names or not include_path:
        return False
    known = frozenset().union(*(_folder_tasks(f) for f in included_folders(include_path)))
    return all(n in known for n in names)


def say_included(argv: Sequence[str], include_path: str) -> None:
    """Log how ``--include_path include_path`` (another folder than the pack) is indexed: :func:`overriding_line` as
    a warning where it says one, else an info line."""
    line = overriding_line(argv, include_path)
    if line:
        logger.warning(line)
    else:
        logger.info("--include_path %s: its tasks are indexed beside the installed task pack's (%s)", include_path,
                    tasks_path())


def overriding_line(argv: Sequence[str], include_path: str) -> str:
    """One line for ``--include_path include_path`` (another folder than the pack), "" where none of its task names
    is the pack's; else it names both folders and the one lm-eval runs: the folder included last (lm-eval's index
    lets a later folder's task override an earlier one's, in a warning per task), ``include_path``. Another install's
    pack folder (every name the pack's) runs its YAMLs with this install's code, which their dotted paths name."""
    pack = str(tasks_path())
    if included_folders(include_path) == [pack]:
        return ""
    ours, theirs = _folder_tasks(pack), _folder_tasks(include_path)
    both = sorted(ours & theirs)
    if not both:
        return ""
    asked = [n for n in task_names(argv) if n in both]
    what = (f"is another copy of the task pack (every task name of the installed pack {pack} is there too)"
            if ours <= theirs else f"holds {counted(len(both), 'task name')} of the installed pack {pack} ("
            f"{', '.join(both[:3])}{', ...' if both[3:] else ''})")
    return (f"--include_path {include_path} {what}: lm-eval runs {include_path}'s YAMLs for "
            f"{', '.join(asked) if asked else 'them'}, not the installed pack's (the folder included last wins; the "
            "results' config_source names it); leave --include_path out to run the installed pack")


@functools.lru_cache(maxsize=8)
def _folder_tasks(include_path: str) -> FrozenSet[str]:
    """The task and group names of ``include_path`` alone (asked by the argument check and by the index swap of one
    command: indexed once)."""
    return frozenset(lm_tasks.TaskManager(include_path=include_path, include_defaults=False).all_tasks)


@contextlib.contextmanager
def pack_only_index(argv: Sequence[str], include_path: str) -> Iterator[bool]:
    """While the block runs, a ``TaskManager`` lm-eval builds for ``include_path`` indexes the pack beside it
    (:func:`included_folders`), and skips lm-eval's built-in tasks if :func:`include_path_covers`; yields whether it
    skips them. lm-eval's CLI reads ``lm_eval.tasks.TaskManager`` when it runs (``EvaluatorConfig.process_tasks``
    imports it then), so the module attribute is what is swapped."""
    covered = include_path_covers(argv, include_path)
    folders = included_folders(include_path)
    if not covered and len(folders) == 1:
        yield False
        return
    original = lm_tasks.TaskManager

    class PackTaskManager(original):
        def __init__(self, *args, **kwargs):
            if include_path and kwargs.get("include_path") == include_path:
                kwargs["include_path"] = folders
            if covered:
                kwargs["include_defaults"] = False
            super().__init__(*args, **kwargs)

    lm_tasks.TaskManager = PackTaskManager
    try:
        yield covered
    finally:
        lm_tasks.TaskManager = original


@contextlib.contextmanager
def indexes_built() -> Iterator[List[Any]]:
    """The ``TaskManager`` objects lm-eval builds while the block runs (its CLI builds one per run, over every YAML it
    knows: seconds), for a refusal that needs the names they hold: a ``run`` with a task lm-eval does not know built
    a second index of the same folders only to say the nearest names."""
    built: List[Any] = []
    current = lm_tasks.TaskManager

    class RecordedTaskManager(current):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            built.append(self)

    lm_tasks.TaskManager = RecordedTaskManager
    try:
        yield built
    finally:
        lm_tasks.TaskManager = current
