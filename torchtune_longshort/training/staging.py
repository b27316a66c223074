"""The staging area of a run's ``output_dir`` (``.staging/``): where a checkpoint is written whole before its commit
(:mod:`.checkpointing`), and which of its entries are the recipe's (a killed save's, discarded by the next start) or a
user's (never deleted).

A save makes its folder ``step_<k>/`` only after it has written the mark ``step_<k>.started`` beside it (flushed to
the disk), and the commit removes the mark once the folder is renamed into place: a ``step_<k>/`` without its mark
is not one the recipe made (a user's, kept there), whatever its name; a kill at any point leaves the mark alone, or
the mark with its folder, both the recipe's. In a marked folder only the files a save writes are the recipe's
(:data:`SAVED_FILES`, :data:`SHARD_PATTERN`): a file put into a killed save's folder is a user's, never deleted."""

from __future__ import annotations

import os
import re
from pathlib import Path, PurePosixPath
from typing import List, Optional, Union

from torchtune_longshort.models.hf_checkpoint import CONFIG_FILE, INDEX_FILE
from torchtune_longshort.models.hf_checkpoint_writer import SHARD_PATTERN
from torchtune_longshort.models.hf_rope import ROPE_SIDE_FILE
from torchtune_longshort.models.peft_adapter import ADAPTER_DIR, ADAPTER_FILES
from torchtune_longshort.models.tokenizer_formats import TOKENIZER_FILES
from torchtune_longshort.output_guard import read_names
from torchtune_longshort.temporary_files import temporary_of
from torchtune_longshort.training.durable_save import fsync_dir

STAGING = ".staging"  # where a checkpoint (and a from-scratch step_0) is written before its commit
STATE_PATTERN = re.compile(r"^step_(\d+)\.pt(\.tmp)?$")  # a file of recipe_state/ (.tmp: being written)
STAGED_PATTERN = re.compile(r"^(old_)?step_\d+$")  # a folder of .staging/: a save being written, a step replaced
STARTED_PATTERN = re.compile(r"^step_\d+\.started$")  # the mark of a step_<k>/ the recipe made (start_staged)
# In each step_<k>: the files the recipe wrote there (relative paths, JSON), so that replacing or deleting the folder
# can tell them from a user's own (an evaluation written beside the weights).
MANIFEST = ".longshort_files"
# Every file a save writes into its staged step folder (recipe_checkpoints.stage_step, write_scratch_start), besides
# the weight shards (SHARD_PATTERN): the checkpoint writer's, the tokenizer files it copies, a LoRA run's adapter/,
# and the commit's list (written aside first: a temporary of it). A killed save's folder holding anything else is
# refused by name, never cleaned (a note put into it was deleted with it). The writers' tests ask unsaved_files of
# what they wrote (test_hf_checkpoint_writer, test_peft_adapter, test_written_tokenizer_json_dummy_prefix).
SAVED_FILES = frozenset((CONFIG_FILE, INDEX_FILE, ROPE_SIDE_FILE, MANIFEST, *TOKENIZER_FILES,
                         *(f"{ADAPTER_DIR}/{name}" for name in ADAPTER_FILES)))


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


def saved_file(rel: str) -> bool:
    """Whether ``rel`` (a ``/``-separated path in a staged step folder) names a file a save writes there."""
    return rel in SAVED_FILES or bool(SHARD_PATTERN.match(rel)) or temporary_of(rel) == MANIFEST


def unsaved_files(staged: Path) -> List[str]:
    """What the staged folder ``staged`` holds that no save writes there (:func:`saved_file`), relative to it,
    sorted: a file, a symbolic link, an empty folder no saved file lies in (the files in a fuller one are named)."""
    out = []
    for q in sorted(staged.rglob("*")):
        rel = q.relative_to(staged).as_posix()
        if q.is_symlink() or (not saved_file(rel) if not q.is_dir() else not any(q.iterdir()) and
                              not any(name.startswith(rel + "/") for name in SAVED_FILES)):
            out.append(rel)
    return out


def listed_entry(q: Path, root: Path) -> bool:
    """Whether ``q``, found under ``root`` by ``rglob``, is an entry that ``root``'s :data:`MANIFEST` must name for
    it to be a run's: a file, or a symbolic link (to a folder too: rglob does not go into it, and a deletion takes
    the link), except a link to a folder inside ``root`` (a logger's own, as wandb's ``latest-run``: deleting it
    deletes nothing else)."""
    if not q.is_dir():
        return True
    if not q.is_symlink():
        return False
    real, top = q.resolve(), root.resolve()
    return not (real == top or top in real.parents)


def unlisted(folder: Path, listed: Optional[List[str]]) -> List[str]:
    """The entries under ``folder`` (:func:`listed_entry`) that ``listed`` (its :data:`MANIFEST`'s names, or None:
    none) does not name, the list itself aside, relative to ``folder``, sorted."""
    names = set(listed or ()) | {MANIFEST}
    return [rel for q in sorted(folder.rglob("*"))
            if listed_entry(q, folder) and (rel := q.relative_to(folder).as_posix()) not in names]


def without_list(folder: Path) -> str:
    """How a refusal names ``folder`` whose :data:`MANIFEST` names nothing: ``<name>/ (no .longshort_files)``, or,
    where the list is there but no JSON list of names (edited, or a file of the user's by that name), that it is
    not one: "no .longshort_files" sent the user looking for a file that was there."""
    what = f"its {MANIFEST} is no JSON list of names" if os.path.lexists(folder / MANIFEST) else f"no {MANIFEST}"
    return f"{folder.name}/ ({what})"


def remove_listed(folder: Path) -> None:
    """Delete what ``folder``'s :data:`MANIFEST` lists, the list last, then the folders left empty: a file it does not
    list (a user's evaluation written beside the weights) stays, and a kill part-way leaves the list while a file it
    names is there, so what stays unlisted is never the recipe's (:func:`foreign_in`). A name that leads out of
    ``folder`` (``..``, an absolute path, a folder in it the user replaced by a link) or at a folder is not deleted:
    the list is a file in the user's folder."""
    top = folder.resolve()
    for rel in read_names(folder / MANIFEST) or ():
        q = folder / rel
        inside = not PurePosixPath(rel).is_absolute() and ".." not in PurePosixPath(rel).parts
        if inside and (q.parent.resolve() == top or top in q.parent.resolve().parents) and (
                q.is_symlink() or not q.is_dir()):
            q.unlink(missing_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)
    for q in sorted((q for q in folder.rglob("*") if q.is_dir() and not q.is_symlink()), reverse=True):
        if not any(q.iterdir()):
            q.rmdir()
    if not any(folder.iterdir()):
        folder.rmdir()


def foreign_in(p: Path) -> List[str]:
    """What of ``p``, an entry of ``.staging/``, the recipe did not write there (paths in ``.staging``); empty when it
    is all the recipe's: a ``step_<k>`` folder beside its :func:`started_mark` that holds only what a save writes
    (else each other file in it is named), an ``old_step_<k>`` folder (a committed step set aside by a save that
    replaces it) that holds only what its :data:`MANIFEST` lists (else each other file; without the list, which
    :func:`remove_listed` deletes last, each file), ``step_<k>.pt`` (``.tmp``) states, marks. A ``step_<k>/``
    without its mark is a user's, named whole (an overwrite deleted it, a note kept in it, without a word), and so
    was a note put into a killed save's marked folder, or an evaluation kept in a step folder a kill mid-replace
    left set aside."""
    if p.is_symlink() or (p.is_dir() and not STAGED_PATTERN.match(p.name)):
        return [p.name]
    if p.is_dir():
        if p.name.startswith("old_"):
            return [f"{p.name}/{rel}" for rel in unlisted(p, read_names(p / MANIFEST))]
        mark = started_mark(p)
        if not mark.is_file() or mark.is_symlink():
            return [p.name]
        return [f"{p.name}/{rel}" for rel in unsaved_files(p)]
    return [] if STATE_PATTERN.match(p.name) or STARTED_PATTERN.match(p.name) else [p.name]


def own_staged(p: Path) -> bool:
    """Whether ``p``, an entry of ``.staging/``, is all the recipe's (:func:`foreign_in` names nothing in it)."""
    return not foreign_in(p)
