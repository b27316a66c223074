"""Which files in an output folder are the run's own: the names the recipe writes at the top of it
(:data:`WRITTEN_HERE`, ``step_<k>``) and, in the metric logger's log folder (or the output folder itself,
:data:`HERE`), the files listed in that folder's :data:`~torchtune_longshort.training.checkpointing.MANIFEST` as
the run wrote them (:func:`record_written`). :mod:`.output_dir`'s ``overwrite`` deletes a folder only when it holds
nothing else (:func:`foreign_written` names what it holds besides).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Sequence

from torchtune_longshort.data.stdlib_overlap import RUN_CONFIG
from torchtune_longshort.output_guard import read_names, write_names
from torchtune_longshort.plural import counted
from torchtune_longshort.temporary_files import remove_abandoned_temporaries, temporary_of
from torchtune_longshort.training.checkpointing import (
    LATEST, MANIFEST, RECIPE_STATE_DIR, STAGING, STEP_PATTERN, PathLike,
)
from torchtune_longshort.training.output_aside import DISCARDED, LOCK, MARKER, REPLACED
from torchtune_longshort.training.staging import listed_entry, without_list

METRICS_FILE = "metrics.jsonl"  # the run's metrics, one JSON line per logged step (training.metrics.RunLog)
# Every name the recipe writes at the top of its output folder (with step_<k> and the metric logger's log_dir when
# it lies inside): overwrite deletes a folder only when it holds nothing else. torchtune's metric loggers write
# torchtune_config.yaml; a file written aside is .<name>.<random>.tmp until renamed (atomic_write_text; <name>.tmp
# from older versions, and atomic_torch_save's).
# MANIFEST at the top lists what the metric logger wrote there when its log_dir is the output folder itself (HERE).
WRITTEN_HERE = (MARKER, LOCK, LATEST, RECIPE_STATE_DIR, STAGING, METRICS_FILE, RUN_CONFIG, MANIFEST,
                REPLACED, DISCARDED)
# the files at the top of an output folder that the recipe writes whole (atomic_write_text: aside, then renamed)
WRITTEN_WHOLE = (MARKER, LATEST, METRICS_FILE, MANIFEST)
HERE = "."  # in ``written_here``: the metric logger writes into the output folder itself (log_dir == output_dir)


def written_by_recipe(name: str, written_here: Sequence[str] = ()) -> bool:
    """Whether ``name``, an entry at the top of an output folder, is one the recipe writes."""
    name = temporary_of(name) or (name[: -len(".tmp")] if name.endswith(".tmp") else name)
    return name in WRITTEN_HERE or name in written_here or STEP_PATTERN.match(name) is not None


def entries_of_another_kind(out: Path, resume: bool = False) -> list:
    """The entries at the top of ``out`` named as the recipe's but not of the kind it writes: a folder or link named
    as a file it writes there (``latest``, ``metrics.jsonl``, ``torchtune_config.yaml``, its marker, lock or list),
    a file or link named ``recipe_state``: a user's, never the recipe's (an overwrite deleted ``latest/`` with what
    it held, or a file ``recipe_state``; a resume trained a step, then ended in '[Errno 21] Is a directory').
    ``resume``: only those a resume writes over (``latest``, ...), without ``metrics.jsonl`` (the resumed run's log
    refuses it in its own words)."""
    files = (MARKER, LOCK, LATEST, RUN_CONFIG, MANIFEST) + (() if resume else (METRICS_FILE,))
    folder = () if resume else (RECIPE_STATE_DIR,)
    return sorted(p.name for p in Path(out).iterdir() if (p.name in files and (p.is_symlink() or p.is_dir()))
                  or (p.name in folder and (p.is_symlink() or not p.is_dir())))


def listed_files(folder: Path) -> Optional[set]:
    """The files a run recorded in ``folder``'s :data:`MANIFEST` (None: no manifest)."""
    listed = read_names(folder / MANIFEST)
    return None if listed is None else set(listed) | {MANIFEST}


def _logged(output_dir: Path, name: str) -> set:
    """The files now under ``output_dir / name`` that a metric logger may have written, as paths relative to that
    folder, manifests left out. For :data:`HERE` (the logger writes into the output folder itself): every file below
    a top-level entry that the recipe does not write itself."""
    folder = output_dir / name
    if not folder.is_dir() or folder.is_symlink():
        return set()
    files = {q.relative_to(folder).as_posix() for q in folder.rglob("*") if listed_entry(q, folder)
             and q.name != MANIFEST}
    return {f for f in files if not written_by_recipe(f.split("/", 1)[0])} if name == HERE else files


def _joined(name: str, rel: str) -> str:
    return rel if name == HERE else f"{name}/{rel}"


def files_under(output_dir: PathLike, written_here: Sequence[str]) -> set:
    """Every file now under the ``written_here`` folders of ``output_dir``, as ``(name, path in that folder)``,
    manifests left out."""
    return {(name, rel) for name in written_here for rel in _logged(Path(output_dir), name)}


def record_written(output_dir: PathLike, written_here: Sequence[str], existed: set = frozenset()) -> None:
    """Add the files now under each folder of ``written_here`` in ``output_dir`` (the metric logger's log folder,
    or :data:`HERE`, the output folder itself), less those that ``existed`` before the run (a resumed run's folder
    may hold a user's note), to that folder's :data:`MANIFEST`, as a step folder lists its own: overwrite deletes
    a log folder only when it holds nothing else."""
    new = files_under(output_dir, written_here) - set(existed)
    for name in written_here:
        folder = Path(output_dir) / name
        if folder.is_dir() and not folder.is_symlink():
            listed = listed_files(folder)
            files = ({rel for n, rel in new if n == name} | (listed or set())) - {MANIFEST}
            if listed is None or files != listed - {MANIFEST}:  # a list that stands is not written again
                write_names(folder / MANIFEST, files)


def foreign_written(output_dir: PathLike, written_here: Sequence[str]) -> list:
    """Files under the ``written_here`` folders of ``output_dir`` that their :data:`MANIFEST` does not list
    (``<name>/<path>``); a log folder that holds files but no manifest (the recipe lists its logger's files as it
    opens it: made by hand, or by a version before the list) is named whole, ``<name>/ (no .longshort_files)``; in
    the output folder itself (:data:`HERE`) every file it does not list is foreign."""
    out = []
    for name in written_here:
        listed, files = listed_files(Path(output_dir) / name), _logged(Path(output_dir), name)
        if listed is None and files and name != HERE:
            out.append(without_list(Path(output_dir) / name))
        else:
            out += sorted(_joined(name, f) for f in files if f not in (listed or ()))
    return out


def remove_killed_writes(output_dir: PathLike, written_here: Sequence[str] = ()) -> List[str]:
    """The temporary files of the recipe's whole-file writes (``.<name>.<8 hex>.tmp``,
    :func:`~torchtune_longshort.output_guard.atomic_open`) that a run killed while writing left beside a file it writes
    in ``output_dir`` (``latest``, ``metrics.jsonl``, its marker, a list of files) or beside the list of files of a
    log folder of ``written_here``, removed with one line naming them; returns their paths in ``output_dir``. Called
    under the folder's lock, where no other process writes those files, so they need not be a day old, as
    ``atomic_open`` asks of them at the next write of the same file (a resumed run left them there). Only a plain file
    of this user's by that exact name goes (:func:`~torchtune_longshort.temporary_files.remove_abandoned_temporaries`),
    never a file or link of the user's."""
    out = Path(output_dir)
    beside = [(HERE, name) for name in WRITTEN_WHOLE] + [(n, MANIFEST) for n in written_here if n != HERE]
    removed = [_joined(where, tmp) for where, name in beside
               if (out / where).is_dir() and not (out / where).is_symlink()
               for tmp in remove_abandoned_temporaries(out / where / name, 0, say=False)]
    if removed:
        print(f"removed {counted(len(removed), 'temporary file')} that a run killed while writing left in output_dir="
              f"{str(out)!r}: {', '.join(removed)}", file=sys.stderr)
    return removed
