"""The staging area of a run's ``output_dir`` (``.staging/``): where a checkpoint is written whole before its commit
(:mod:`.checkpointing`), and which of its entries are the recipe's (a killed save's, discarded by the next start) or a
user's (never deleted).

A save makes its folder ``step_<k>/`` only after it has written the mark ``step_<k>.started`` beside it (flushed to
the disk), and the commit removes the mark once the folder is renamed into place: a ``step_<k>/`` without its mark
is not one the recipe made (a user's, kept there), whatever its name; a kill at any point leaves the mark alone, or
the mark with its folder, both the recipe's."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Union

from torchtune_longshort.training.durable_save import fsync_dir

STAGING = ".staging"  # where a checkpoint (and a from-scratch step_0) is written before its commit
STATE_PATTERN = re.compile(r"^step_(\d+)\.pt(\.tmp)?$")  # a file of recipe_state/ (.tmp: being written)
STAGED_PATTERN = re.compile(r"^(old_)?step_\d+$")  # a folder of .staging/: a save being written, a step replaced
STARTED_PATTERN = re.compile(r"^step_\d+\.started$")  # the mark of a step_<k>/ the recipe made (start_staged)


def staged_state_path(staged: Union[str, Path]) -> Path:
    """Where a staged checkpoint folder's recipe state is written before :meth:`StepCheckpoints.commit`."""
    staged = Path(staged)
    return staged.with_name(staged.name + ".pt")


def started_mark(staged: Union[str, Path]) -> Path:
    """The mark that says the recipe made the staged folder ``staged`` (``.staging/step_<k>.started``)."""
    staged = Path(staged)
    return staged.with_name(staged.name + ".started")


def start_staged(staged: Path) -> None:
    """Make the staged folder ``staged`` (``.staging/step_<k>``, and ``.staging``) for a save to write into: its
    :func:`started_mark` first, on the disk before the folder is made. A folder already there is not written into
    (``FileExistsError``): one of the recipe's was discarded before (a user's is refused at the run's start)."""
    staged.parent.mkdir(parents=True, exist_ok=True)
    os.close(os.open(started_mark(staged), os.O_WRONLY | os.O_CREAT, 0o666))
    fsync_dir(staged.parent)
    staged.mkdir()


def own_staged(p: Path) -> bool:
    """An entry of ``.staging/`` the recipe writes there: a ``step_<k>`` folder beside its :func:`started_mark`,
    ``old_step_<k>`` folders, ``step_<k>.pt`` (``.tmp``) states, marks. A ``step_<k>/`` without its mark is a user's
    (an overwrite deleted it, a note kept in it, without a word)."""
    if p.is_symlink():
        return False
    if p.is_dir():
        mark = started_mark(p)
        return bool(STAGED_PATTERN.match(p.name)) and (p.name.startswith("old_") or (
            mark.is_file() and not mark.is_symlink()))
    return bool(STATE_PATTERN.match(p.name) or STARTED_PATTERN.match(p.name))
