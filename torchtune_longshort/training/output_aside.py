"""An earlier run that ``overwrite_output_dir`` replaces, moved aside while the new run's metric logger starts
(:meth:`~torchtune_longshort.training.output_dir.OutputDirLock.clear_earlier_run`): a logger that cannot start
leaves the earlier run whole, and a start killed part-way leaves it where the next start puts it back. Also what an
existing folder offers a new run (:func:`ways_on`), what in it is a user's (:func:`user_tmp_folder`) and whether a run
stopped in its setup left it (:func:`nothing_written`)."""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional

from torchtune_longshort.output_guard import read_names
from torchtune_longshort.training.checkpointing import MANIFEST, STAGING, StepCheckpoints
from torchtune_longshort.training.staging import STARTED_PATTERN

MARKER = ".longshort_output"  # written into every output_dir this recipe creates; overwrite needs it
REPLACED = ".replaced"  # the earlier run that overwrite replaces, moved aside while the new run opens its logger
DISCARDED = ".replaced.discarded"  # that earlier run once the new run's logger has started: being deleted
LOCK = ".lock"  # the output folder's lock file (training.output_dir.OutputDirLock)


def remove_tree(path: Path) -> None:
    """Delete ``path`` (a folder: its files, its :data:`MANIFEST` last; a symbolic link itself, not its target)."""
    if path.is_dir() and not path.is_symlink():
        for child in sorted(path.iterdir(), key=lambda c: c.name == MANIFEST):
            remove_tree(child)
        path.rmdir()
    else:
        path.unlink()


def resumable_aside(out: Path) -> bool:
    """Whether ``out`` holds, in :data:`REPLACED`, an earlier run with a resumable step that an overwrite start killed
    before it began left there (:func:`claim_output_dir` puts it back first)."""
    aside = out / REPLACED
    return aside.is_dir() and StepCheckpoints(aside).latest(resumable=True) is not None


def _unlisted(out: Path, target: Path) -> List[str]:
    """The files at ``target`` (an entry of ``out`` made after the earlier run was moved aside) that no list of the
    killed start names as its logger's: its own :data:`MANIFEST` (a log folder) or the one at the top of ``out``
    (a logger writing into ``out`` itself), as paths relative to ``out``."""
    top = read_names(out / MANIFEST) or []
    if not target.is_dir() or target.is_symlink():
        return [] if target.name == MANIFEST or target.name in top else [target.name]
    listed = set(read_names(target / MANIFEST) or ()) | {n.split("/", 1)[1] for n in top
                                                         if n.startswith(target.name + "/")}
    files = (q.relative_to(target).as_posix() for q in target.rglob("*") if q.is_symlink() or not q.is_dir())
    return sorted(f"{target.name}/{f}" for f in files if f != MANIFEST and f not in listed)


def mend_interrupted_start(out: Path) -> None:
    """What an overwrite start killed part-way (SIGKILL, power loss) left, mended by the next start, which holds the
    lock: an earlier run in :data:`REPLACED` was never replaced (the new run's logger had not started): it is put back,
    what the killed start's logger made in its place (the files it listed) removed; one in :data:`DISCARDED` had been
    replaced (checked deletable, the new run started): its deletion is finished. A file in that place that no list
    names (put there after the kill, or written before the killed logger's list was) is refused by name, before
    anything moves: it was deleted with the killed start's folder."""
    aside = out / REPLACED
    back = list(aside.iterdir()) if aside.is_dir() and not aside.is_symlink() else []
    in_place = [out / c.name for c in back if (out / c.name).exists() or (out / c.name).is_symlink()]
    kept = [f for target in in_place for f in _unlisted(out, target)]
    if kept:
        raise FileExistsError(
            f"output_dir={str(out)!r} holds {str(aside)!r}, the earlier run an overwrite start that was killed set "
            f"aside, and in its place {', '.join(repr(f) for f in kept[:3])}{' ...' if len(kept) > 3 else ''}, which "
            f"no run listed as its own: move what you keep out of {', '.join(repr(str(t)) for t in in_place)}, "
            "delete it, and start again (the earlier run is then put back)")
    if (out / DISCARDED).is_dir():
        remove_tree(out / DISCARDED)
    for child in back:
        target = out / child.name
        if target.exists() or target.is_symlink():  # the killed start's logger folder, made after the move: listed
            remove_tree(target)
        child.rename(target)
    if back or aside.is_dir():
        aside.rmdir()


def ways_on(out: Path, blocked: Optional[str] = None) -> str:
    """What a refused plain rerun into ``out`` can do instead: only the ways that one of its folders accepts (a
    resume needs a checkpoint to resume from; an overwrite, a folder this recipe made). ``blocked``: where
    ``overwrite_output_dir=True`` alone would be refused, the advice that gets it taken
    (:func:`.overwrite_rules.overwrite_blocked`, a user's file there named to move out first); it advised the
    overwrite alone, which that file then refused."""
    if not (out / MARKER).is_file():
        return "This recipe did not make it: choose another output_dir"
    if StepCheckpoints(out).latest(resumable=True) is None and not resumable_aside(out):
        return ("It holds no checkpoint to resume from (its run stopped before its first save): "
                f"{blocked or 'pass overwrite_output_dir=True to replace it, or choose another output_dir'}")
    if blocked:
        return f"Pass resume=True to continue that run, or train anew: {blocked}"
    return ("Pass resume=True to continue that run, overwrite_output_dir=True to replace it, or choose another "
            "output_dir")


def user_tmp_folder(p: Path) -> bool:
    """A folder named ``<a recipe name>.tmp``: the recipe's ``.tmp`` entries are the files a killed atomic write left
    (``latest.tmp``, ``metrics.jsonl.tmp``), never folders; a ``step_9.tmp/`` is a user's."""
    return p.name.endswith(".tmp") and p.is_dir() and not p.is_symlink()


def nothing_written(out: Path) -> bool:
    """Whether ``out`` holds only what a run stopped in its setup leaves (SIGTERM or SIGKILL after it claimed the
    folder: its marker, its lock, empty staging folders): no step, log or file of a run, so a plain rerun takes it
    (a live run's lock still refuses it); before, that rerun was told to pass resume=True, with nothing to resume."""
    names = {p.name for p in out.iterdir()}
    staging = out / STAGING
    return MARKER in names and names <= {MARKER, LOCK, staging.name} and not any(
        (not p.is_dir() and not (p.parent == staging and STARTED_PATTERN.match(p.name))) or p.is_symlink()
        for p in (staging.rglob("*") if staging.is_dir() else ()))
