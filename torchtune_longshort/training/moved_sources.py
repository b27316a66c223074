"""A resume whose start checkpoint (``checkpointer.checkpoint_dir``) or tokenizer (``tokenizer.path``) names another
place than the run's (a study's or a model's folder moved, or copied as it was): both are compared exactly, so it was
refused as a change of what the run trains, advising the saved values, which a user whose folders moved cannot give.
Where the new place holds what the run read, the resume goes on, each key that named the old place logged as applied:
a start folder whose :meth:`~torchtune_longshort.models.hf_checkpoint.CheckpointFolder.content_digest` is the one the
recipe state saved, a tokenizer whose id files are the resumed step's copies
(:func:`~torchtune_longshort.training.tokenizer_unchanged.same_tokenizer`). Otherwise the refusal names the check and
the way on (the folder back at the saved place)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple

from torchtune_longshort.models.hf_checkpoint import CheckpointFolder
from torchtune_longshort.training.tokenizer_unchanged import same_tokenizer

Change = Tuple[str, Any, Any]


class Moved(NamedTuple):
    """A key's change that names a start or tokenizer moved as it was (equal to the plain ``(key, old, new)``)."""

    key: str
    old: str
    new: str


START, TOKENIZER = "checkpointer.checkpoint_dir", "tokenizer.path"
SamePlace = Callable[[Dict[str, Any], Dict[str, Any]], Tuple[List[Change], Dict[str, str]]]


def moved_sources(state: Dict[str, Any], step_dir: Path) -> SamePlace:
    """A check of two flattened configs (the saved one, the new one; paths resolved) of a resume from ``step_dir``
    (its recipe state ``state``): ``([(key, old, new)] that name a moved start or tokenizer holding what the run
    read, {key: words for its refusal})``. Any key (``model.model.checkpoint_dir``) whose old and new values are
    those of a moved start counts as moved with it; the start and the tokenizer each by their own check."""

    def same_place(old: Dict[str, Any], new: Dict[str, Any]) -> Tuple[List[Change], Dict[str, str]]:
        verdicts: Dict[str, bool] = {}
        notes: Dict[str, str] = {}
        for key, check in ((START, _start_note), (TOKENIZER, _tokenizer_note)):
            a, b = old.get(key), new.get(key)
            if a != b and isinstance(a, str) and isinstance(b, str) and os.path.isabs(a) and os.path.isabs(b):
                note = check(a, Path(b), state, step_dir)
                verdicts[key] = note is None
                if note:
                    notes[key] = note
        # a key naming the same refused move (the config's own checkpoint_dir) is told where to look, not to give
        # back its old value
        for key in list(notes):
            notes.update({k: f" (the same move as {key})" for k, v in new.items()
                          if k != key and v == new[key] and old.get(k) == old[key]})
        moved = {new[key]: old[key] for key, same in verdicts.items() if same}
        changes = [Moved(key, old[key], v) for key, v in new.items() if verdicts.get(key, True) and isinstance(v, str)
                   and v in moved and old.get(key) == moved[v]]
        return changes, notes

    return same_place


def _start_note(old: str, new: Path, state: Dict[str, Any], step_dir: Path) -> Optional[str]:
    """None where the start folder ``new`` is the one the run started from (its content digest the saved one); else
    the words for the refusal ("" where ``new`` is no checkpoint folder: the refusal as it was)."""
    saved = state.get("start_digest")
    try:
        same = CheckpointFolder.open(new).holds_digest(saved)  # an unmarked saved one: by the formula before v2
    except (OSError, ValueError):
        return ""
    if same:
        return None
    why = ("the run's recipe state holds no digest of its start checkpoint to compare it with" if saved is None else
           "its config.json or weights are not those of the start checkpoint whose digest the run's recipe state saved")
    return f" ({why}; to resume, put the run's start checkpoint back at {old!r})"


def _tokenizer_note(old: str, new: Path, state: Dict[str, Any], step_dir: Path) -> Optional[str]:
    """None where the tokenizer source ``new`` gives the ids the run trained with (a file under the saved file's name,
    its id files the copies in ``step_dir``); else the words for the refusal ("" where ``new`` is not there)."""
    if not new.exists():
        return ""
    if (new.is_dir() or new.name == Path(old).name) and same_tokenizer(new, step_dir):
        return None
    return (f" (its tokenizer files are not the copies in {step_dir.name}, which the run trained with; to resume, put "
            f"the run's tokenizer back at {old!r})")


def moved_folders(changes: Sequence[Change]) -> Tuple[List[str], List[Change]]:
    """The :class:`Moved` changes among ``changes``, one text per folder moved (``'/a' moved to '/b':
    checkpointer.checkpoint_dir, tokenizer.path``: a key's old and new paths, their common tail taken off, name the
    folder), and the other changes: a study folder moved was logged as one line per key naming it."""
    keys: Dict[Tuple[str, str], List[str]] = {}
    rest = []
    for change in changes:
        if isinstance(change, Moved):
            keys.setdefault(_moved_folder(change.old, change.new), []).append(change.key)
        else:
            rest.append(change)
    return [f"{a!r} moved to {b!r}: {', '.join(sorted(k))}" for (a, b), k in keys.items()], rest


def _moved_folder(old: str, new: str) -> Tuple[str, str]:
    """The folder moved: ``old`` and ``new`` without the path components they end in alike ('/a/start' and
    '/b/start': '/a', '/b')."""
    a, b = Path(old).parts, Path(new).parts
    same = 0
    while same < min(len(a), len(b)) - 1 and a[-1 - same] == b[-1 - same]:
        same += 1
    return str(Path(*a[:len(a) - same])), str(Path(*b[:len(b) - same]))
