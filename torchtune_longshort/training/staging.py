"""The staging area of a run's ``output_dir`` (``.staging/``): where a checkpoint is written whole before its commit
(:mod:`.checkpointing`), and which of its entries are the recipe's (a killed save's, discarded by the next start) or a
user's (never deleted)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Union

STAGING = ".staging"  # where a checkpoint (and a from-scratch step_0) is written before its commit
STATE_PATTERN = re.compile(r"^step_(\d+)\.pt(\.tmp)?$")  # a file of recipe_state/ (.tmp: being written)
STAGED_PATTERN = re.compile(r"^(old_)?step_\d+$")  # a folder of .staging/: a save being written, a step replaced


def staged_state_path(staged: Union[str, Path]) -> Path:
    """Where a staged checkpoint folder's recipe state is written before :meth:`StepCheckpoints.commit`."""
    staged = Path(staged)
    return staged.with_name(staged.name + ".pt")


def own_staged(p: Path) -> bool:
    """An entry of ``.staging/`` the recipe writes there: ``step_<k>`` / ``old_step_<k>`` folders, ``step_<k>.pt``
    (``.tmp``) states."""
    if p.is_symlink():
        return False
    return bool(STAGED_PATTERN.match(p.name)) if p.is_dir() else bool(STATE_PATTERN.match(p.name))
