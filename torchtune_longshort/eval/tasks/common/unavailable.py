"""A task, or one request of it, that cannot be scored: NaN (or no score) with the reason, never a sunk run.

lm-eval 0.4.13 aborts the whole run, and writes no results file, when one task's data fails to load or one
request raises. This module is the one owner of how the task pack says "this cannot be scored, and why" instead:

* **Data that cannot be had** (a missing file, the hub offline or unreachable, no document long enough, a model
  the task cannot use, a length the model does not cover): the task's loader raises :class:`TaskDataError`
  and turns it into a one-row placeholder whose ``error`` field holds the reason (:func:`placeholder`;
  lm-eval cannot build a task from zero rows).
* **A request the model refuses** (a prompt longer than the model and a task that declares no truncation, no
  room left to generate): the ``longshort`` model returns a result whose ``refusal`` attribute holds the reason
  (:class:`RefusedText` for generations, :class:`RefusedScores` for divergences, ``TokenLoglikelihood`` with
  ``refusal`` for log-likelihoods); :func:`refusal_of` reads it.
* Either way the task's ``process_results`` returns :func:`nan_results` (NaN scores; length families) or
  :func:`missing_results` (no score and ``missing_data`` = 1: members of a group, whose mean then covers the
  tasks that have data), both with the reason under :data:`ERROR_METRIC`. The pack's task class
  (:class:`.pack_task.PackTask`) takes that reason out of the metrics, so lm-eval's table stays a table of numbers,
  and writes the distinct reasons to the task's ``configs`` entry of the results file, under
  :data:`NOT_SCORED_KEY` (``{"<reason>": <samples>}``; a length-swept task also the lengths, under
  :data:`NOT_SCORED_LENGTHS_KEY`); the reasons are also logged when they arise. The other
  tasks of the run finish, and the run writes its results file.

Hub data goes through :func:`load_hub_dataset`, which turns "offline / unreachable / not found" into a
:class:`TaskDataError` naming the data set and the local alternative (with ``HF_DATASETS_OFFLINE`` /
``HF_HUB_OFFLINE`` set, ``datasets`` fails at once without touching the network).
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any, Dict, Iterable, Mapping, Optional

from torchtune_longshort.data.data_files import cache_problem
from torchtune_longshort.data.hf_loading import offline_variable
from torchtune_longshort.data.text_files import DataSourceError
from torchtune_longshort.eval.console_log import ALIKE_ON_EVERY_RANK
from torchtune_longshort.started_as import EVAL_MAIN, advised_command

logger = logging.getLogger(__name__)

# The doc field that carries the reason a placeholder row stands for a task that cannot run.
ERROR_FIELD = "error"
# The key under which a task's process_results returns the reason a sample was not scored (never a reported metric).
ERROR_METRIC = "error"
# The key of a task's ``configs`` entry in the results file that lists the reasons: {reason: number of samples}.
NOT_SCORED_KEY = "not_scored"
# The key of a length-swept task's ``configs`` entry that lists the lengths with samples not scored: {label: samples}
# (the metrics pooled over lengths, passkey's ``acc``, cover the other lengths).
NOT_SCORED_LENGTHS_KEY = "not_scored_lengths"
# The key of a task's ``configs`` entry that lists the length x depth cells (``1k``, ``1k_d50``) lm-eval's --limit
# left without a document (the task's rows go round its cells; a smaller --limit scores the first cells only).
LIMIT_LEFT_OUT_KEY = "limit_left_out"
# The marker metric of a group member without data (its score is left out, so the group mean covers the rest).
MISSING_METRIC = "missing_data"
# The task metadata key that names the lm-eval model of the run (``--model``); the pack's CLI wrapper sets it.
MODEL_KEY = "lm_eval_model"
LONGSHORT_MODEL = "longshort"
# What model_of says when it cannot tell which model (not longshort) a run uses.
OTHER_MODEL = "(a model other than longshort)"


class TaskDataError(ValueError):
    """Bad or unavailable task input (missing file, no text long enough, hub offline, ...): the message names the
    field and the fix. A task's loader turns it into a placeholder that scores NaN with this message."""


class TooFewSequences(TaskDataError):
    """A text source that gives fewer fixed-length sequences than asked: ``finding`` (the counts) and ``hint`` (what
    to change, in the task's own metadata terms) apart, so a caller that names its own fields (the study's
    pre-flight check) reads the finding without parsing the message."""

    def __init__(self, finding: str, hint: str):
        super().__init__(f"{finding}: {hint}")
        self.finding, self.hint = finding, hint


# ------------------------------------------------------------------------------------------------ placeholders
def placeholder(task: str, message: str, fields: Mapping[str, Any], features: Any = None):
    """A one-row ``datasets.Dataset`` standing for task ``task`` that cannot run, its ``error`` field holding
    ``"<task>: <message>"``; logs that reason once as an error. ``fields``: the task's other columns (dummy
    values, so that its prompt template renders); ``features``: optional ``datasets.Features``."""
    import datasets

    reason = message if message.startswith(f"{task}:") else f"{task}: {message}"
    logger.error("%s -- no score for it (the results file gives this reason); the other tasks go on", reason,
                 extra=ALIKE_ON_EVERY_RANK)  # every process reads the whole data set
    row = {**fields, ERROR_FIELD: reason}
    return datasets.Dataset.from_list([row], features=features)


def reason_of(doc: Mapping[str, Any]) -> str:
    """The reason a placeholder row stands for (empty for a real row)."""
    return str(doc.get(ERROR_FIELD) or "")


# ------------------------------------------------------------------------------------------------ refusals
class RefusedText(str):
    """An empty generation the model refused to produce; ``refusal`` says why (scored NaN, not as wrong)."""

    refusal: str

    def __new__(cls, refusal: str):
        obj = super().__new__(cls, "")
        obj.refusal = refusal
        return obj

    def __reduce__(self):
        return (RefusedText, (self.refusal,))


class RefusedScores(dict):
    """NaN divergence values of a request the model refused; ``refusal`` says why."""

    def __init__(self, names: Iterable[str], refusal: str):
        super().__init__({n: float("nan") for n in names})
        self.refusal = refusal

    def __reduce__(self):
        return (RefusedScores, (tuple(self), self.refusal))


def refusal_of(result: Any) -> str:
    """The reason the model refused a request (empty when it answered it)."""
    return str(getattr(result, "refusal", "") or "")


# ------------------------------------------------------------------------------------------------ results
def nan_results(reason: str, values: Mapping[str, Any]) -> Dict[str, Any]:
    """A sample's metrics when it cannot be scored: ``values`` (the task's NaN form of each metric) and the
    reason under :data:`ERROR_METRIC`."""
    return {**values, ERROR_METRIC: reason}


def missing_results(reason: str) -> Dict[str, Any]:
    """A group member's sample without data: no score, ``missing_data`` = 1 and the reason."""
    return {MISSING_METRIC: 1.0, ERROR_METRIC: reason}


# ------------------------------------------------------------------------------------------------ hub data
_HUB_MODULES = ("httpx", "httpx2", "huggingface_hub", "datasets", "requests", "urllib3", "fsspec", "aiohttp")


def offline_mode() -> bool:
    """True when ``datasets`` reads the hub as offline (:func:`offline_variable`)."""
    return offline_variable() is not None


def is_hub_failure(err: BaseException) -> bool:
    """Whether ``err`` means the data could not be fetched (offline, unreachable, not found, HTTP error), as
    opposed to a bug or malformed data."""
    return isinstance(err, OSError) or type(err).__module__.split(".")[0] in _HUB_MODULES


def hub_failure_reason(what: str, err: BaseException, alternative: str = "") -> str:
    """The reason line for hub data ``what`` that could not be loaded: the error, the offline setting and the
    local alternative."""
    where = (
        f"offline mode is on ({offline_variable()}) and it is not in the local cache"
        if offline_mode()
        else "the Hugging Face hub could not be reached or does not have it"
    )
    own_folder = cache_problem(err)  # HOME=<a file>: huggingface_hub's token file, datasets' cache
    if own_folder:
        return f"data {what} unavailable: {own_folder}" + (f"; {alternative}" if alternative else "")
    cache = os.environ.get("HF_DATASETS_CACHE") or os.environ.get("HF_HOME")
    msg = f"data {what} unavailable: {where} ({type(err).__name__}: {str(err)[:200]})"
    if cache:
        msg += f"; cache: {cache}"
    return msg + (f"; {alternative}" if alternative else "")


def load_hub_dataset(path: str, *args: Any, alternative: str = "", **kwargs: Any):
    """``datasets.load_dataset(path, *args, **kwargs)``; a fetch failure becomes :class:`TaskDataError` with
    :func:`hub_failure_reason` (other errors pass through unchanged)."""
    import datasets

    try:
        return datasets.load_dataset(path, *args, **kwargs)
    except Exception as err:  # noqa: BLE001  -- classified just below; anything else is re-raised
        if not is_hub_failure(err):
            raise
        what = repr(path) + (f" ({', '.join(map(repr, args))})" if args else "")
        if kwargs.get("name"):
            what += f" config {kwargs['name']!r}"
        raise TaskDataError(hub_failure_reason(what, err, alternative)) from err


# Hub data sets this process found out of reach before reading a document, with the reason the task gave: a task
# asks its source once per length, and each ask waited out huggingface_hub's retries (~23 s) to fail the same way
# (longshort_ppl's five default lengths offline: ~2 minutes). The key holds what reaches the hub or a cached copy,
# and the asker's local-data hint, as the reason names its keys (ppl_source=stdlib; passkey's are others).
_UNREACHABLE: Dict[tuple, str] = {}


def _hub_key(what: str, alternative: str = "") -> tuple:
    return (what, alternative, os.environ.get("HF_ENDPOINT"), offline_variable(), os.environ.get("HF_HOME"),
            os.environ.get("HF_DATASETS_CACHE"))


def out_of_reach(err: Optional[BaseException]) -> bool:
    """Whether ``err`` or an error in its chain is a connection failure (``datasets``' ConnectionError "Couldn't
    reach", or httpx's / requests' own)."""
    seen = set()
    while err is not None and id(err) not in seen:
        seen.add(id(err))
        if isinstance(err, ConnectionError) or type(err).__name__ in ("ConnectError", "ConnectTimeout"):
            return True
        err = err.__cause__ or err.__context__
    return False


def guard_hub_iteration(it: Iterable[Any], what: str, alternative: str = ""):
    """Iterate ``it`` (a streamed hub data set), turning a fetch failure at any point into :class:`TaskDataError`.
    A data set out of reach before its first document is asked once a process: later asks with the same
    ``alternative`` (the task's other lengths) fail at once with that reason. Only a failure of the source is
    remembered (a hub error, or the ``DataSourceError`` the training loaders word one in): another error raised while
    a connection error was handled (a parser's ValueError) passes through, and a later ask reads again."""
    key = _hub_key(what, alternative)
    if key in _UNREACHABLE:
        raise TaskDataError(_UNREACHABLE[key])
    started = False
    try:
        for item in it:
            started = True
            yield item
    except TaskDataError:
        raise
    except Exception as err:  # noqa: BLE001
        hub = is_hub_failure(err)
        reason = hub_failure_reason(what, err, alternative) if hub else str(err)  # a DataSourceError: as it is said
        source = hub or isinstance(err, DataSourceError)  # not a bug or a record that failed in its wake
        if source and not started and not offline_mode() and out_of_reach(err):  # offline: no retries to spare
            _UNREACHABLE[key] = f"{reason} (asked once in this process, not again for this data set)"
        if not hub:
            raise
        raise TaskDataError(reason) from err


# ------------------------------------------------------------------------------------------------ the model
def evaluated_model() -> Optional[Any]:
    """The model instance lm-eval's evaluator is running in this call stack (``lm`` of ``lm_eval.evaluator``'s
    ``evaluate``, or of ``simple_evaluate`` once it has built it: tasks load after the model there), unwrapped from
    ``--use_cache``'s ``CachingLM``; None outside them (a task loaded before ``evaluate``)."""
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_globals.get("__name__") == "lm_eval.evaluator" and frame.f_locals.get("lm") is not None:
            lm = frame.f_locals["lm"]
            caching = getattr(sys.modules.get("lm_eval.api.model"), "CachingLM", None)
            return lm.lm if caching is not None and isinstance(lm, caching) else lm
        frame = frame.f_back
    return None


def _name_of(lm: Any) -> Optional[str]:
    """``longshort`` or ``hf`` for an instance of those models' classes (a subclass too), else None. A class is
    looked up only where its module is loaded: an instance of it needs it loaded."""
    for name, module, cls in ((LONGSHORT_MODEL, "torchtune_longshort.eval.model.adapter", "LongShortLM"),
                              ("hf", "lm_eval.models.huggingface", "HFLM")):
        found = getattr(sys.modules.get(module), cls, None)
        if found is not None and isinstance(lm, found):
            return name
    return None


def model_tokenizer_path() -> Optional[str]:
    """The tokenizer folder or file of the model lm-eval's evaluator runs (the ``longshort`` model's, or ``hf``'s
    local folder), for a task whose metadata names none: from Python, ``simple_evaluate`` puts ``model_args`` into
    the tasks' metadata only where it builds the ``TaskManager`` itself, and the pack's tasks need one given."""
    lm = evaluated_model()
    name = _name_of(lm) if lm is not None else None
    tokenizer = getattr(lm, "tokenizer", None)
    path = getattr(tokenizer, "path" if name == LONGSHORT_MODEL else "name_or_path", None) if name else None
    return str(path) if isinstance(path, (str, os.PathLike)) and Path(path).exists() else None


def model_of(metadata: Mapping[str, Any]) -> Optional[str]:
    """The lm-eval model a task runs under, from its metadata (:data:`MODEL_KEY`, set by the pack's CLI wrapper
    ``longshort-eval``). Without that key: the class of the model lm-eval's evaluator runs, where it is the
    ``longshort`` or the ``hf`` model (:func:`evaluated_model`: ``simple_evaluate`` / ``evaluate`` from Python,
    handed a name or an instance); else ``None`` when the ``longshort`` model's module is loaded in this process
    (the model cannot be told), else the ``--model`` of this process's command line (stock ``lm-eval``, which has
    no ``longshort`` model: it has no plugin entry point), else :data:`OTHER_MODEL`."""
    model = metadata.get(MODEL_KEY)
    if model:
        return str(model)
    lm = evaluated_model()
    if lm is not None and _name_of(lm):
        return _name_of(lm)
    if "torchtune_longshort.eval.model.adapter" in sys.modules:
        return None
    argv = list(sys.argv)
    named = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--model"]
    named += [a.split("=", 1)[1] for a in argv if a.startswith("--model=")]
    return named[-1] if named else OTHER_MODEL


def model_text(model: Optional[str]) -> str:
    """``--model hf``, or "another model" when the name is not known."""
    return "another model" if model in (None, OTHER_MODEL) else f"--model {model}"


def needs_longshort(task: str, metadata: Mapping[str, Any], why: str) -> Optional[str]:
    """The refusal reason when ``task`` needs the ``longshort`` model and the run uses another (else None)."""
    model = model_of(metadata)
    if model is None or model == LONGSHORT_MODEL:
        return None
    return (f"needs --model longshort ({why}); this run uses {model_text(model)}. Run it with "
            f"{advised_command(EVAL_MAIN)} run --model longshort --model_args pretrained=<checkpoint> ... "
            "(stock lm-eval has no longshort model)")


def model_positions(metadata: Mapping[str, Any]) -> Optional[int]:
    """The longest sequence lm-eval's ``hf`` model (or any model other than ``longshort``) will run without
    cutting it: ``max_length`` from its model_args, else ``max_position_embeddings`` of a local ``pretrained``
    folder's ``config.json``; ``None`` when unknown or when the model is ``longshort`` (which refuses over-long
    requests itself, knowing its RoPE scaling and ``allow_extrapolation``)."""
    model = model_of(metadata)
    if model is None or model == LONGSHORT_MODEL:
        return None
    if metadata.get("max_length") not in (None, ""):
        try:
            return int(metadata["max_length"])
        except (TypeError, ValueError):
            return None
    cfg = _local_config(metadata.get("pretrained")) or {}
    for key in ("max_position_embeddings", "n_positions", "n_ctx"):
        if isinstance(cfg.get(key), int):
            return int(cfg[key])
    length = getattr(evaluated_model(), "max_length", None)  # an hf instance from Python: the length it cuts to
    return length if isinstance(length, int) and not isinstance(length, bool) else None


def _local_config(pretrained: Any) -> Optional[Dict[str, Any]]:
    """The parsed config.json of a local ``pretrained`` folder; None for a hub name or an unreadable file."""
    if not (isinstance(pretrained, str) and (Path(pretrained) / "config.json").is_file()):
        return None
    import json

    try:
        cfg = json.loads((Path(pretrained) / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return cfg if isinstance(cfg, dict) else None


def check_fits_model(n_tokens: int, metadata: Mapping[str, Any]) -> None:
    """Raise :class:`TaskDataError` when a request of ``n_tokens`` tokens is longer than a non-``longshort``
    model runs (lm-eval's ``hf`` model would cut it from the left and score what is left). The message names where
    the limit comes from: ``max_length`` in ``--model_args``, else ``config.json``'s positions, which lm-eval's
    ``max_length=`` raises (a dynamic ``rope_scaling`` in config.json then scales as the sequence grows)."""
    limit = model_positions(metadata)
    if limit is None or n_tokens <= limit:
        return
    given = metadata.get("max_length") not in (None, "")
    source = "its max_length" if given else "its config.json's max_position_embeddings"
    more = "" if given else f", max_length={n_tokens} in --model_args to run past them"
    raise TaskDataError(
        f"its requests need {n_tokens} tokens but {model_text(model_of(metadata))} runs at most {limit} "
        f"({source}) and would cut them from the left: refused. Use a model with more positions{more}, or "
        f"{advised_command(EVAL_MAIN)} --model longshort {_longshort_way(metadata)}"
    )


def metadata_trust(value: Any) -> Optional[bool]:
    """A task metadata's ``trust_remote_code`` (lm-eval puts ``--model_args`` there) as a reader's answer
    (:func:`~torchtune_longshort.rope.checkpoint_code.component_code`); None where not given."""
    return None if value is None else str(value).lower() in ("true", "1", "yes")


def _longshort_way(metadata: Mapping[str, Any]) -> str:
    """How the ``longshort`` model runs a local ``pretrained`` folder: with the RoPE method its config.json carries,
    read as that model reads it (:func:`~torchtune_longshort.models.hf_rope.rope_spec_from_hf_config`), so no
    ``rope=`` override is asked of a folder already scaled; a method of one's own it names is read under the task's
    trust (stock lm-eval sets no reader's gate: it was imported, running its module, with nothing asked)."""
    cfg, override = _local_config(metadata.get("pretrained")), "with rope=<method>,rope_factor=<f>"
    if cfg is None:
        return override
    # deferred: torch (the models package's __init__ imports it; only a refusal gets here)
    from torchtune_longshort.models.hf_rope import SPEC_KEY, rope_spec_from_hf_config
    from torchtune_longshort.rope.checkpoint_code import PACKAGE, TASK_FIX, UntrustedCheckpointCode, component_code

    try:
        with component_code(metadata_trust(metadata.get("trust_remote_code")), TASK_FIX):
            spec = rope_spec_from_hf_config(cfg)
    except UntrustedCheckpointCode:
        method = str(cfg[SPEC_KEY]["method"])
        return (f"with {TASK_FIX}, if you trust the RoPE method {method!r} its config.json names (code outside "
                f"{PACKAGE}, in {method.split('.')[0]}: not imported)")
    except (KeyError, TypeError, ValueError):  # a scaling (or a config) the longshort model refuses too
        return override
    return f"(it runs the folder's own {spec['method']} scaling)" if spec else override
