"""The study's ``eval`` section: what lm-eval runs on every checkpoint (lengths and sample counts per task family,
BABILong, LongBench-E), on which device and context, and where each family's numbers sit in a run's results
(:func:`metric_of`), and the ``python -m torchtune_longshort.eval run`` command that evaluates a checkpoint with it
(:meth:`EvalConfig.task_metadata`, :meth:`EvalConfig.command`). The tasks themselves are the pack's registry's
(:data:`torchtune_longshort.eval.tasks.TASK_FAMILIES`).
"""

from __future__ import annotations

import inspect
import json
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from torchtune_longshort.eval.tasks import TASK_FAMILIES
from torchtune_longshort.eval.tasks.babilong.generator import generate
from torchtune_longshort.eval.tasks.babilong.haystack import GLOB_EXAMPLE, HAYSTACK_FORMS, LENGTHS
from torchtune_longshort.eval.tasks.babilong.stories import QA_TASKS
from torchtune_longshort.eval.tasks.babilong.task import task_of
from torchtune_longshort.eval.tasks.common.lengths import lengths_key, per_depth, per_length
from torchtune_longshort.study.fields import StudySection, setting
from torchtune_longshort.study import values
from torchtune_longshort.config.values import boolean, device_name, integer, length, text
from torchtune_longshort.metrics.misalignment import DEFAULT_NUM_SAMPLES

# The study's length-swept families (lengths: eval.<family>_lengths) -> their lm-eval task (the pack's registry).
_SWEPT = ("ppl", "passkey", "misalignment")
FAMILY_TASK = {f: TASK_FAMILIES[f].task for f in _SWEPT}
# Study family -> the prefix of its task's metadata keys.
FAMILY_METADATA_PREFIX = {f: TASK_FAMILIES[f].metadata_prefix for f in _SWEPT}

# The study's name for a column at depth 0 (the claims' "retrieval at the start of the context"): <name>_depth_0.
DEPTH_0 = "_depth_0"


def _named(name: str) -> tuple:
    """``(family, metric, depth or None)`` of a study name: the registry's ``study_names`` of a length-swept family
    (:data:`FAMILY_TASK`), or one of them + :data:`DEPTH_0`; read from the registry at each call, so the study keeps
    no table of its own."""
    base, depth = (name[: -len(DEPTH_0)], 0) if name.endswith(DEPTH_0) else (name, None)
    for family in _SWEPT:
        for study_name, metric in TASK_FAMILIES[family].study_names:
            if study_name == base:
                return family, metric, depth
    known = [n for f in _SWEPT for n, _ in TASK_FAMILIES[f].study_names]
    raise ValueError(f"{name!r} is not a study name: expected babilong or one of {known} (each also with "
                     f"{DEPTH_0}), the study_names of torchtune_longshort.eval.tasks.TASK_FAMILIES")


def metric_of(family: str, n: Any, depth: Optional[int] = None) -> tuple:
    """``(lm-eval task, metric)`` holding ``family`` (a study name: ``babilong``, or a ``study_names`` entry of the
    task registry, optionally + :data:`DEPTH_0`) at length ``n`` (an int, or a BABILong label such as ``"1k"`` or
    ``"1k_d50"`` for the ``babilong`` family), and at ``depth`` (percent) when given."""
    if family == "babilong":  # its lengths are labels, a depth already in them ("1k_d50")
        fam = TASK_FAMILIES["babilong"]
        task, metric = fam.task, f"{dict(fam.study_names)['babilong']}_{n}"
    else:
        fam, metric, own_depth = _named(family)
        task, metric = TASK_FAMILIES[fam].task, per_length(metric, int(n))
        depth = own_depth if depth is None else depth
    return task, (metric if depth is None else per_depth(metric, depth))


@dataclass(frozen=True)
class BabilongConfig(StudySection):
    """``eval.babilong``: BABILong-style samples generated once per study
    (:mod:`torchtune_longshort.eval.tasks.babilong.generator`)."""

    lengths: List[str] = setting(doc="length labels (0k, 1k, 2k, ...)", check=values.babilong_lengths)
    depths: Optional[List[int]] = setting(None, doc="fact depths in percent (null: facts scattered at random)",
                                          check=values.depths)
    n: int = setting(2, doc="samples per task, length and depth", check=integer(1))
    qa: str = setting("qa1,qa2,qa3,qa4,qa5", doc="comma list of QA tasks", check=values.qa_tasks)
    haystack: Optional[str] = setting(None, doc=f"{HAYSTACK_FORMS} {GLOB_EXAMPLE} (default: the generator's)",
                                      check=text, written_if_set=True)

    @property
    def haystack_name(self) -> str:
        """The haystack the generator reads: ``haystack``, else the generator's own default."""
        if self.haystack is not None:
            return self.haystack
        return inspect.signature(generate).parameters["haystack"].default

    @property
    def tasks(self) -> List[str]:
        """The lm-eval tasks that score ``qa``: the pack's group when ``qa`` is all of QA1-QA5, else one task per QA
        asked (the group would run the tasks not asked, whose data is not generated, and note each as missing)."""
        asked = self.tasks_asked
        if set(asked) == set(QA_TASKS):
            return [TASK_FAMILIES["babilong"].task]
        return [task_of(q) for q in asked]

    @property
    def tasks_asked(self) -> List[str]:
        """The QA tasks of ``qa``, in its order (``["qa1", "qa3"]``)."""
        return list(dict.fromkeys(q.strip() for q in self.qa.split(",") if q.strip()))


def default_lengths(L0: int, L: int) -> Dict[str, List[int]]:
    """The lengths each family is evaluated at when the config names none: perplexity and misalignment at
    ``L0, L, 2L, 4L``, passkey at ``L, 2L, 4L``."""
    return {"ppl_lengths": [L0, L, 2 * L, 4 * L], "passkey_lengths": [L, 2 * L, 4 * L],
            "misalignment_lengths": [L0, L, 2 * L, 4 * L]}


@dataclass(frozen=True)
class EvalConfig(StudySection):
    """``eval``: lm-eval on every checkpoint through ``python -m torchtune_longshort.eval run --model longshort``."""

    ppl_lengths: List[int] = setting(None, doc="perplexity lengths (default: L0, L, 2L, 4L)", check=values.lengths)
    passkey_lengths: List[int] = setting(None, doc="passkey lengths (default: L, 2L, 4L)", check=values.lengths)
    misalignment_lengths: List[int] = setting(None, doc="misalignment (Eq. 4) lengths (default: L0, L, 2L, 4L)",
                                              check=values.lengths)
    ppl_num_samples: int = setting(20, doc="perplexity sequences per length", check=integer(1))
    passkey_num_samples: int = setting(5, doc="passkey prompts per length and depth", check=integer(1))
    mis_num_samples: int = setting(None, doc="misalignment samples per length (default: the metric's, "
                                   "metrics.misalignment.DEFAULT_NUM_SAMPLES)", check=integer(1))
    ppl_source: str = setting("stdlib", doc="the perplexity task's text source", check=text)
    batch_size: int = setting(1, doc="lm-eval batch size", check=integer(1))
    device: str = setting("cpu", doc="lm-eval device: cpu, cuda, cuda:N, mps or mps:N", check=device_name)
    dtype: str = setting("float32", doc="the eval model's dtype", check=text)
    babilong: Optional[BabilongConfig] = setting(None, doc="BABILong-style QA (null: not run)",
                                                 section=BabilongConfig)
    longbench_e_data_dir: Optional[str] = setting(None, doc="a local LongBench folder: adds LongBench-E when it "
                                                  "exists", check=text)
    eval_base: bool = setting(True, doc="evaluate the base model too (a reference row)", check=boolean)
    include_path: Optional[str] = setting(None, doc="an lm-eval task folder (default: the installed pack)",
                                          check=text)
    max_length: int = setting(None, doc="the eval model's context (default: the longest length asked, BABILong's "
                              "labels included)", check=length(1))
    metadata: Optional[Dict[str, Any]] = setting(None, doc="more lm-eval --metadata for the pack's tasks",
                                                 check=values.task_metadata, written_if_set=True, names=True)

    def __post_init__(self) -> None:
        if self.mis_num_samples is None:
            object.__setattr__(self, "mis_num_samples", DEFAULT_NUM_SAMPLES)
        asked = [self.lengths_of(f) for f in FAMILY_TASK]
        if self.max_length is None and all(n is not None for n in asked):
            # a BABILong label is the token budget of its whole request: the study generates its rows to fit it
            longest = max([n for lengths in asked + [self.babilong_tokens] for n in lengths], default=0)
            if longest > 0:
                object.__setattr__(self, "max_length", longest)

    def with_default_lengths(self, L0: int, L: int) -> "EvalConfig":
        """This section with the lengths it leaves unset filled (:func:`default_lengths`)."""
        unset = {k: v for k, v in default_lengths(L0, L).items() if getattr(self, k) is None}
        return replace(self, **unset) if unset else self

    def lengths_of(self, family: str) -> List[int]:
        """The lengths of a length-swept family of :data:`FAMILY_TASK`."""
        return getattr(self, f"{family}_lengths")

    @property
    def babilong_lengths(self) -> List[str]:
        """BABILong's length labels ([] when BABILong is not run)."""
        return self.babilong.lengths if self.babilong else []

    @property
    def babilong_tokens(self) -> List[int]:
        """The token budgets of BABILong's length labels ([] when BABILong is not run)."""
        return [LENGTHS[label] for label in self.babilong_lengths]

    def metadata_value(self, key: str, default: Any = None) -> Any:
        """A key of ``metadata`` (the pack's tasks' own keys; ``default``: the task's default for it)."""
        return (self.metadata or {}).get(key, default)

    def task_metadata(self, extra: Optional[Dict[str, Any]] = None) -> Dict[str, Any]:
        """The lm-eval ``--metadata`` of an evaluation: each family's source, sample count and lengths, then
        ``extra`` (data folders the caller made), then ``metadata`` (the config's own keys win)."""
        out = {"ppl_source": self.ppl_source, "ppl_num_samples": self.ppl_num_samples,
               "passkey_num_samples": self.passkey_num_samples, "mis_num_samples": self.mis_num_samples,
               **{lengths_key(FAMILY_METADATA_PREFIX[f]): self.lengths_of(f) for f in FAMILY_TASK}}
        out.update(extra or {})
        out.update(self.metadata or {})
        return out

    def command(self, model_args: Dict[str, Any], tasks: Sequence[str], output_path: Path, metadata: Dict[str, Any],
                root: Path) -> List[str]:
        """``python -m torchtune_longshort.eval run --model longshort ...``: ``tasks`` on the checkpoint that
        ``model_args`` names (``pretrained=...``; ``dtype`` is this section's), results and samples under
        ``output_path``, ``include_path`` resolved against ``root``."""
        args = {**model_args, "dtype": self.dtype}
        return [sys.executable, "-m", "torchtune_longshort.eval", "run", "--model", "longshort",
                "--model_args", ",".join(f"{k}={v}" for k, v in args.items()),
                *(["--include_path", str(Path(root) / self.include_path)] if self.include_path else []),
                "--tasks", ",".join(tasks), "--output_path", str(output_path), "--log_samples",
                "--batch_size", str(self.batch_size), "--device", str(self.device), "--metadata", json.dumps(metadata)]
