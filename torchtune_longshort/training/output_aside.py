"""An earlier run that ``overwrite_output_dir`` replaces, moved aside while the new run's metric logger starts
(:meth:`~torchtune_longshort.training.output_dir.OutputDirLock.clear_earlier_run`): a logger that cannot start
leaves the earlier run whole, and a start killed part-way leaves it where the next start puts it back."""

from __future__ import annotations

from pathlib import Path

from torchtune_longshort.training.checkpointing import MANIFEST, StepCheckpoints

REPLACED = ".replaced"  # the earlier run that overwrite replaces, moved aside while the new run opens its logger
DISCARDED = ".replaced.discarded"  # that earlier run once the new run's logger has started: being deleted


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


def mend_interrupted_start(out: Path) -> None:
    """What an overwrite start killed part-way (SIGKILL, power loss) left, mended by the next start, which holds the
    lock: an earlier run in :data:`REPLACED` was never replaced (the new run's logger had not started): it is put back,
    what the killed start's logger made in its place removed; one in :data:`DISCARDED` had been replaced (checked
    deletable, the new run started): its deletion is finished."""
    if (out / DISCARDED).is_dir():
        remove_tree(out / DISCARDED)
    aside = out / REPLACED
    if not aside.is_dir() or aside.is_symlink():
        return
    for child in list(aside.iterdir()):
        target = out / child.name
        if target.exists() or target.is_symlink():  # the killed start's logger folder, made after the move
            remove_tree(target)
        child.rename(target)
    aside.rmdir()
