"""Known upstream noise, filtered narrowly in the project's own entry points (never on import of the library).

Each filter names the logger (or warning category and module) and a message pattern; anything else those
libraries say still gets through. The entry points that call :func:`quiet_upstream`: ``python -m
torchtune_longshort.eval`` (and ``cli_run.run_cli``), ``python -m torchtune_longshort.study`` (its ``table1`` and
``figures`` too), ``longshort-validate``, the BABILong generator, the ``longshort-misalignment`` CLI, ``python -m
torchtune_longshort.synthetic``, ``longshort-eval-report`` and the recipe's ``recipe_main``.

Why each one says nothing to the user:

- torchao "Skipping import of cpp extensions ...": torchtune imports torchao, whose C++ kernels do not match the
  installed torch; no code path of this project uses them.
- lm-eval "<task>: Custom kwargs can be passed to `--metadata` ...": printed for every task built by a
  ``custom_dataset`` function, i.e. every task of this pack, whether or not kwargs were given. Not an entry point's
  filter: the pack's task class drops it around its own ``download`` (:func:`dropping`), under stock ``lm-eval`` too.
- lm-eval "[<task>] Metrics were not scored on the same number of documents ...": the pack's per-depth and
  per-length metrics (``acc_depth_<d>``, ``acc_<len>_d<depth>``, ``score_<bucket>``) are by design means over the
  documents of that depth / length / bucket; the size-weighting it warns about is not used by the pack's groups
  (``weight_by_size: false``). Filtered only for the pack's task names.
- lm-eval "Group '<group>': metric 'missing_data,none' is missing in k/n tasks": the pack's ``missing_data`` marker
  exists only on the tasks whose data is missing, so it is "missing" on every task that had data. Filtered for the
  pack's groups and that metric only: the same warning for a real score (``acc``, ``score``) still shows, and the
  reports mark such partial group scores (``value (k/n tasks)``).
- fuzzywuzzy "Using slow pure-python SequenceMatcher": a speed hint from a LongBench metric's dependency.
- transformers "`is_gradient_checkpointing` is deprecated and will be removed in v6 ...": peft's ``PeftModel`` reads
  that property of the model it wraps (``--model hf --model_args ...,peft=<adapter>``); no code of the user's or the
  project's does.
- torchtune "Saving final epoch checkpoint.": its checkpointer says this at every save the recipe makes (the recipe
  saves by step, not by epoch); the recipe prints its own line naming the step and folder.
- matplotlib "mkdir -p failed for path ~/.config/matplotlib ...", "... is not a writable directory" and "Matplotlib
  created a temporary cache directory at /tmp/matplotlib-... because there was an issue with the default path": with
  no writable home (a container's read-only or missing HOME) and MPLCONFIGDIR unset, matplotlib uses a temporary
  folder, which it removes at exit, and says so in two lines at every command that draws. Its own folders only: a
  folder the user named in MPLCONFIGDIR that cannot be used is still reported.
- git "fatal: not a git repository ...": lm-eval records ``git describe --always`` of the working folder in its
  results and lets git write to the terminal; outside a repository that is git's error line. ``longshort-eval``
  asks git the same question with its stderr discarded (:func:`quiet_lm_eval_git`; the hash is recorded as before).

Note: under ``tune run`` torchtune (and so torchao) is imported before the recipe file runs, so the torchao line
still appears in the recipe's own output; in the eval, study and metric entry points it is filtered.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import subprocess
import threading
import warnings
from pathlib import Path
from typing import Dict, Iterable, Iterator, List, Optional, Tuple

from torchtune_longshort.pack_prefix import PREFIX

# Task names of this pack as they appear in lm-eval's messages (every one starts with the pack's prefix).
_PACK_TASK = rf"(?:{re.escape(PREFIX)}[\w-]+)"

# logger name -> [(level, message pattern)]; a record is dropped only when its logger, level and message all match
# (and a pattern's ``default`` group, where it has one, names one of matplotlib's own folders: :func:`_mpl_default`).
LOG_FILTERS: Dict[str, List[Tuple[int, str]]] = {
    "torchao": [(logging.WARNING, r"^Skipping import of cpp extensions")],
    "lm_eval.evaluator_utils": [
        (logging.WARNING, rf"^\[{_PACK_TASK}\] Metrics were not scored on the same number of documents")
    ],
    "lm_eval.api.group": [
        (logging.WARNING,
         rf"^Group '{_PACK_TASK}': metric 'missing_data,[^']*' is missing in")
    ],
    "torchtune.utils._logging": [(logging.INFO, r"^Saving final epoch checkpoint\.$")],
    "matplotlib": [(logging.WARNING, r"^mkdir -p failed for path (?P<default>.*/matplotlib): "),
                   (logging.WARNING, r"^(?P<default>.*/matplotlib) is not a writable directory$"),
                   (logging.WARNING, r"^Matplotlib created a temporary cache directory at .* because there was an "
                                     r"issue with (the default path|resolving the home directory)")],
}

# (message pattern, category, module pattern) for warnings.filterwarnings
WARNING_FILTERS: List[Tuple[str, type, str]] = [
    (r"Using slow pure-python SequenceMatcher", UserWarning, r"fuzzywuzzy(\..*)?$"),
    (r"`is_gradient_checkpointing` is deprecated and will be removed", FutureWarning, r"transformers\.modeling_utils$"),
]


class DropMessages(logging.Filter):
    """Drops the records of one logger whose level and message match one of ``rules``; passes all others."""

    def __init__(self, rules: List[Tuple[int, str]]):
        super().__init__()
        self.rules = [(level, re.compile(pattern, re.S)) for level, pattern in rules]

    def filter(self, record: logging.LogRecord) -> bool:
        msg = record.getMessage()
        for level, p in self.rules:
            m = p.search(msg) if record.levelno == level else None
            if m and ("default" not in p.groupindex or _mpl_default(m["default"])):
                return False
        return True


def _mpl_default(folder: str) -> bool:
    """Whether ``folder`` is one matplotlib picks with MPLCONFIGDIR unset (its own computation: the XDG config or
    cache folder's ``matplotlib``, resolved as it resolves it); a folder the user named there stays reported."""
    import matplotlib  # deferred: asked only of a line matplotlib logged, so it is imported already

    defaults = []
    for base in ("_get_xdg_config_dir", "_get_xdg_cache_dir"):
        try:
            defaults.append(str(Path(getattr(matplotlib, base)(), "matplotlib").resolve()))
        except (AttributeError, RuntimeError):  # another matplotlib, or no home to compute it from
            continue
    return folder in defaults


@contextlib.contextmanager
def dropping(name: str, rules: List[Tuple[int, str]]) -> Iterator[None]:
    """Drop the records of logger ``name`` that match ``rules`` (as :class:`DropMessages`) while the block runs:
    for a library call whose line is known noise wherever it runs, not for an entry point's whole process."""
    f = DropMessages(rules)
    logging.getLogger(name).addFilter(f)
    try:
        yield
    finally:
        logging.getLogger(name).removeFilter(f)


class HeldRecords(logging.Filter):
    """Holds back the records the loggers ``names`` log while it is entered (``with held: ...``), then hands them on
    as they were logged (:meth:`release`) or forgets them (:meth:`drop`): for a library line that comes just before
    an exception the project explains in its own line (``datasets``' json builder logs "Failed to load JSON from file
    ..." and then raises), said only where the project's line does not explain it. Other threads' records of those
    loggers meanwhile are held too, and released with them."""

    def __init__(self, names: Iterable[str]):
        super().__init__()
        self.loggers = [logging.getLogger(name) for name in names]
        self.held: List[logging.LogRecord] = []

    def filter(self, record: logging.LogRecord) -> bool:
        self.held.append(record)
        return False

    def __enter__(self) -> "HeldRecords":
        for logger in self.loggers:
            logger.addFilter(self)
        return self

    def __exit__(self, *exc: object) -> None:
        for logger in self.loggers:
            logger.removeFilter(self)

    def release(self) -> None:
        """Hand the held records on to their loggers' handlers, as logging would have (levels already passed)."""
        held, self.held = self.held, []
        for record in held:
            logging.getLogger(record.name).handle(record)

    def drop(self) -> None:
        self.held = []


# How long datasets' progress bars stay unshown while a read is held (:func:`late_bars`), in seconds.
BAR_DELAY = 3.0
_late = {"depth": 0, "init": None}
_late_lock = threading.Lock()


@contextlib.contextmanager
def late_bars(seconds: float = BAR_DELAY) -> Iterator[None]:
    """While the block runs, ``datasets``' progress bars ("Generating train split", "Downloading data") start with
    tqdm's own ``delay``: a bar shows once its read has run ``seconds``, so a read that ends sooner, in a one-line
    refusal of a torn record, prints no bar ahead of it (it printed one, ``Generating train split: 0 examples``,
    whatever the read's length), and a long read still shows its progress. A bar the user set (``delay=``) keeps its
    own; datasets' switch (``HF_DATASETS_DISABLE_PROGRESS_BARS``, ``disable_progress_bars``) still rules. Nested and
    concurrent blocks share one hook, removed when the last ends."""
    from datasets.utils import tqdm as bar  # deferred: datasets (heavy import); the class of all datasets' bars

    with _late_lock:
        if not _late["depth"]:
            _late["init"] = init = bar.__init__

            def delayed(self, *args, **kwargs):
                init(self, *args, **{"delay": seconds, **kwargs})

            bar.__init__ = delayed
        _late["depth"] += 1
    try:
        yield
    finally:
        with _late_lock:
            _late["depth"] -= 1
            if not _late["depth"]:
                bar.__init__ = _late["init"]


_installed = False


def filter_warnings() -> None:
    """Add :data:`WARNING_FILTERS` to the ``warnings`` filters (part of :func:`quiet_upstream`)."""
    for message, category, module in WARNING_FILTERS:
        warnings.filterwarnings("ignore", message=message, category=category, module=module)


def quiet_upstream() -> None:
    """Install the filters above (once per process). Call it first thing in an entry point, before the imports
    whose noise it filters (torchao's line is logged when torchao is imported)."""
    global _installed
    if _installed:
        return
    for name, rules in LOG_FILTERS.items():
        logging.getLogger(name).addFilter(DropMessages(rules))
    filter_warnings()
    _installed = True


def _git_describe() -> Optional[str]:
    """lm-eval's ``get_git_commit_hash`` with git's stderr discarded (same value, same fallback)."""
    from lm_eval.loggers.utils import get_commit_from_path

    try:
        p = subprocess.run(["git", "describe", "--always"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        p = None
    if p is not None and p.returncode == 0:
        return p.stdout.strip()
    return get_commit_from_path(os.getcwd())


def quiet_lm_eval_git() -> None:
    """Make lm-eval's evaluator record the git hash without git printing to the terminal (see the module doc)."""
    import lm_eval.evaluator

    lm_eval.evaluator.get_git_commit_hash = _git_describe
