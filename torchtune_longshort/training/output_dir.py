"""The recipe's output folder rules: what may be written over, what ``overwrite`` may delete, and the lock that
keeps a second run out.

- ``resume=True``: the folder must hold a complete, resumable ``step_<k>`` (:class:`~torchtune_longshort.training.
  checkpointing.StepCheckpoints`).
- otherwise an existing, non-empty folder is refused unless ``overwrite`` is set, and ``overwrite`` deletes only a
  folder this recipe made (:data:`MARKER`) holding nothing the recipe does not write (:mod:`.written_files`: the
  names it writes; in the step folders and the metric logger's folder, the files their manifest lists), never
  one that holds or lies inside an input of the run, the working directory, ``$HOME`` or a git work tree
  (:mod:`.overwrite_rules`).
- :func:`claim_output_dir` checks those rules, takes the folder's lock (:class:`OutputDirLock`, the owner's PID)
  and prepares a new folder; a refused setup gives a folder it made back. An earlier run that ``overwrite``
  replaces is deleted only by :meth:`OutputDirLock.clear_earlier_run`, which the recipe calls once its setup has
  passed every check, before its first write: a setup that refuses (a model that does not fit, weights that
  cannot be read, a metric logger that cannot start: :mod:`.output_aside`) leaves the earlier run whole.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Tuple

from torchtune_longshort.launcher import launched_rank
from torchtune_longshort.made_folders import missing_root, remove_made_folders
from torchtune_longshort.output_guard import atomic_write_text
from torchtune_longshort.refusals import Refusal
from torchtune_longshort.training.lock_holder import (
    folder_flock, holder_alive, process_start, read_holder, written_as_lock, written_holder,
)
from torchtune_longshort.training.output_aside import (
    DISCARDED, LOCK, MARKER, REPLACED, mend_interrupted_start, remove_tree as _remove,
    resumable_aside, ways_on as _ways_on,
)
from torchtune_longshort.training.checkpointing import (
    RECIPE_STATE_DIR, STAGING, STATE_PATTERN, PathLike, StepCheckpoints,
)
from torchtune_longshort.training.written_files import (
    HERE, files_under, entries_of_another_kind, foreign_written, record_written, remove_killed_writes,
    written_by_recipe,
)
from torchtune_longshort.training.overwrite_rules import (
    Input, check_deletable, deletion_rank, foreign_entries, holds_a_run, overwrite_advice, overwrite_blocked,
)

def prepare_output_dir(
    output_dir: PathLike, *, resume: bool, overwrite: bool, protect: Sequence[Input] = (),
    written_here: Sequence[str] = (), max_steps: Optional[int] = None,
) -> Path:
    """Check the output directory rules before anything is built or written.

    - ``resume``: the folder must hold at least one complete, resumable ``step_<k>`` checkpoint.
    - otherwise an existing, non-empty folder is an error unless ``overwrite`` is set. ``overwrite`` deletes only
      a folder this recipe made (it holds :data:`MARKER`) and that holds nothing the recipe does not write
      (:data:`.written_files.WRITTEN_HERE`, ``step_<k>``, the names in ``written_here``) and no other run's output
      folder at any depth (a :data:`MARKER` below it); never a filesystem root, a folder that
      contains the working directory or ``$HOME``, a git work tree, or a folder that contains one of ``protect``
      (every input the run reads) or lies inside one. Paths are compared resolved (``~``, symlinks, ``..``).

    Returns the folder as a Path (created, with its marker, if needed).
    """
    out = Path(output_dir)
    check_output_dir(out, resume=resume, overwrite=overwrite, protect=protect, written_here=written_here,
                     max_steps=max_steps)
    if resume:
        return out
    if out.exists() and any(p.name != LOCK for p in out.iterdir()):
        # in the order that keeps a kill part-way an earlier run the next overwrite still takes for the recipe's: the
        # states (a state counts as the recipe's only beside its step folder's list), the step folders, the rest,
        # each folder's list of files last of it, the marker last of all; this run's own lock stays
        for child in sorted((c for c in out.iterdir() if c.name != LOCK), key=deletion_rank):
            _remove(child)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / MARKER, "made by torchtune_longshort's recipe; overwrite_output_dir=True may delete this "
                      "folder\n")  # whole or not at all: a full disk leaves no empty marker
    return out


def check_output_dir(output_dir: PathLike, *, resume: bool, overwrite: bool, protect: Sequence[Input] = (),
                     written_here: Sequence[str] = (), max_steps: Optional[int] = None) -> None:
    """The rules of :func:`prepare_output_dir`, checked without touching anything; ``max_steps``: the last step the
    run trains (a resume never writes a step folder past it: a user's ``step_5/`` there stays, untouched)."""
    out = Path(output_dir)
    if out.exists() and not out.is_dir():
        raise NotADirectoryError(f"output_dir={str(out)!r} is a file, not a folder: choose another output_dir")
    if launched_rank() == 0:  # a launch's other ranks never claim it: rank 0's lock is theirs
        OutputDirLock(out).check_free()
    if resume:
        for p in (q for q in StepCheckpoints(out).states() if q.is_dir() or (q.is_symlink() and not q.exists())):
            # skipped as no state, the resume went on from an older step and its save failed writing over it
            what = "a folder" if p.is_dir() else "a broken link"
            raise FileExistsError(f"resume=True: {p} is {what}, where the recipe keeps {p.stem}'s optimizer and "
                                  f"data state (a file): move it out of {RECIPE_STATE_DIR}/, then resume")
        if StepCheckpoints(out).latest(resumable=True) is None and not resumable_aside(out):
            # step_0 (a run from scratch's start) is there only once its setup passed: a run from a checkpoint, or one
            # killed before that, leaves none (the line said "leaves only step_0" there too)
            left = "only step_0" if StepCheckpoints(out).path(0).is_dir() else "no step folder"
            hint = ((StepCheckpoints(out).why_not_resumable() or f"a run killed before its first save leaves {left}: "
                     f"{overwrite_advice(out, protect, written_here)}") if (out / MARKER).is_file() else
                    "it does not exist: start the run without resume=True" if not out.exists() else
                    StepCheckpoints(out).not_made_here())
            raise FileNotFoundError(
                f"resume=True but output_dir={str(out)!r} holds no complete step_<k> checkpoint with its "
                f"{RECIPE_STATE_DIR}/step_<k>.pt to resume from ({hint})")
        latest = StepCheckpoints(out).latest(resumable=True)
        moved = StepCheckpoints(out).moved_step(int(latest.name.split("_")[1])) if latest is not None else None
        if moved:  # resumed from an older step, the run would train the moved one's steps again and replace its state
            raise FileNotFoundError(f"resume=True would continue output_dir={str(out)!r} from {latest.name}, an older "
                                    f"step than its newest: {moved} (or, to go on from {latest.name}, delete that "
                                    "state)")
        foreign = StepCheckpoints(out).foreign_files(resumable_only=True, through=max_steps)
        if foreign:  # a newer step folder than the one resumed from is written again, its old copy deleted
            first = foreign[0].split("/")[0].split(" (")[0]
            raise FileExistsError(f"resume=True would {'clear' if first == STAGING else 'replace'} {first} of "
                                  f"output_dir={str(out)!r}, which holds {', '.join(repr(f) for f in foreign[:3])}"
                                  f"{' ...' if len(foreign) > 3 else ''} that the recipe did not write: move those "
                                  "out of it first")
        named = entries_of_another_kind(out, resume=True)  # the run writes latest there after it trained a step
        if named:
            raise FileExistsError(f"resume=True would write {named[0]} of output_dir="
                                  f"{str(out)!r}, a folder or link there, not the recipe's file: move it out of it "
                                  "first")
        return
    if holds_a_run(out):
        if overwrite and (out / REPLACED).is_dir():  # a killed start's: claim_output_dir mends it, then checks
            return
        if not overwrite:
            raise FileExistsError(f"output_dir={str(out)!r} exists and is not empty; refusing to write over it. "
                                  f"{_ways_on(out, overwrite_blocked(out, protect, written_here, other=True))}")
        check_deletable(out, protect, written_here)


class OutputDirInUse(Refusal, RuntimeError):
    """Another live run holds the output folder's lock."""


class OutputDirLock:
    """An exclusive lock on an output folder: a ``.lock`` file holding the owner's PID and, on Linux, its start
    time (``<pid> <start>``: :func:`process_start`), created with O_EXCL.

    A lock whose process is gone (a killed run) is taken over, and so is one whose PID is alive but started at
    another time (the PID was reused by an unrelated process after the run died); a live one refuses the second
    writer with a message naming the holder. A lock file of an earlier version (the PID alone) is read as before:
    held while that PID is alive. ``field`` and ``holder``: how that message names the folder and the command that
    holds it (the study's ``--out``: ``--out``, ``study``).
    """

    def __init__(self, output_dir: PathLike, field: str = "output_dir", holder: str = "run"):
        self.path = Path(output_dir) / LOCK
        self.field, self.holder_kind, self.held = field, holder, False
        self.made_folder = False  # set by claim_output_dir: the folder did not exist before this run
        self.made_root: Optional[Path] = None  # its outermost parent this run made with it (claim_output_dir)
        self.written_here: Tuple[str, ...] = ()  # names the run writes there besides the recipe's (its logs)
        self.existed: set = set()  # the files in those folders before this run (set by claim_output_dir)
        self.resumed = False  # set by claim_output_dir: resume=True (remove_killed_writes, once its setup passed)
        self.earlier_run: Optional[Tuple[Sequence[Input], Sequence[str]]] = None  # (protect, written_here) of an
        # earlier run that overwrite replaces, kept until clear_earlier_run
        self._before: Optional[dict] = None  # the folder before the lock file was made (_entries)
        self._made_at: Optional[int] = None  # the folder's mtime the lock file's creation left (ns)

    def acquire(self) -> "OutputDirLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        with folder_flock(self.path.parent):  # read, taken over and written by one start at a time
            for _ in range(2):
                self._before = _entries(self.path.parent)  # after a stale lock's removal: the folder as it stands
                try:
                    fd = os.open(str(self.path), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
                except FileExistsError:
                    if not written_as_lock(self.path):  # a user's file or folder named .lock: theirs, kept
                        raise OutputDirInUse(
                            f"{self.field}={str(self.path.parent)!r} holds {self.path.name!r}, which is not a lock "
                            f"file this project wrote (a file or folder of another kind or content): move it away, or "
                            f"choose another {self.field}") from None
                    busy = self._in_use(*self._written_holder())
                    if busy is not None:
                        raise busy from None
                    self.path.unlink(missing_ok=True)  # stale: its process is gone (or its PID now another's)
                    continue
                start = process_start(os.getpid())
                try:
                    with os.fdopen(fd, "w") as f:
                        f.write(f"{os.getpid()}{'' if start is None else f' {start}'}\n")
                except BaseException:  # a full disk: no lock file left empty
                    self.path.unlink(missing_ok=True)
                    raise
                self.held = True
                with contextlib.suppress(OSError):
                    self._made_at = self.path.parent.stat().st_mtime_ns
                return self
        raise RuntimeError(f"could not take the lock {self.path}")

    def _in_use(self, holder: Optional[int], started: Optional[str]) -> Optional[OutputDirInUse]:
        """The refusal for a lock that ``holder`` (a PID, and its start time) still holds; None: free or stale."""
        if holder is not None and holder == os.getpid():
            return OutputDirInUse(
                f"{self.field}={str(self.path.parent)!r} is held by this process (PID {holder}, {self.path}): an "
                f"earlier {self.holder_kind} object here did not give it back; call its cleanup() (or "
                f"release_output_dir()), or choose another {self.field}")
        if holder is not None and holder_alive(holder, started):
            return OutputDirInUse(
                f"{self.field}={str(self.path.parent)!r} is in use by another {self.holder_kind} (PID {holder}, "
                f"{self.path}); wait for it, or choose another {self.field}")
        return None

    def check_free(self) -> None:
        """Refuse a folder whose lock another live process holds (:meth:`acquire`'s message), before the folder's
        rules are read (:func:`check_output_dir`): a second run into the folder of a run still setting up was told
        that run had stopped before its first save, to pass overwrite_output_dir=True (or, with resume=True, to
        start it again so); this process's own lock is :meth:`acquire`'s to name."""
        holder, started = read_holder(self.path)
        if holder != os.getpid():
            busy = self._in_use(holder, started)
            if busy is not None:
                raise busy

    def clear_earlier_run(self, opening: Callable[[], Any] = lambda: None) -> Any:
        """Delete the earlier run that ``overwrite`` replaces (its rules checked again: nothing the recipe did not
        write); ``opening()`` (the metric logger's start, which may fail: wandb without a login) runs first, with
        the earlier run moved aside into :data:`REPLACED` (renames) so that it finds the folder as a new run does,
        and moved back when ``opening()`` raises: the earlier run stays whole. Returns what ``opening()`` returns."""
        if self.earlier_run is None:
            opened = opening()
            self.remove_killed_writes()
            self.record_written()  # listed at once: a run killed before its first save leaves no unlisted log
            return opened
        protect, written_here = self.earlier_run
        out, aside = self.path.parent, self.path.parent / REPLACED
        check_output_dir(out, resume=False, overwrite=True, protect=protect, written_here=written_here)
        aside.mkdir()  # none left by a killed start: claim_output_dir mended it
        # .staging stays: this run's step_0 from scratch waits there (an earlier run's is what a killed save left)
        moved = [p.name for p in out.iterdir() if p.name not in (LOCK, MARKER, REPLACED, STAGING)]
        for name in moved:
            (out / name).rename(aside / name)
        try:
            opened = opening()
        except BaseException:
            for name in moved:  # what the failed start made in its place (its log folder) goes, the earlier run's back
                if (out / name).exists() or (out / name).is_symlink():
                    _remove(out / name)
                (aside / name).rename(out / name)
            aside.rmdir()
            raise
        self.existed, self.earlier_run = set(), None  # the log folders hold only what this run's logger wrote
        self.record_written()  # before a kill can leave them unlisted (then refused by overwrite)
        aside.rename(out / DISCARDED)  # replaced now: a start killed from here on leaves it to be deleted, not put back
        _remove(out / DISCARDED)
        return opened

    def remove_killed_writes(self) -> None:
        """A resume's: the temporary files a kill inside a whole-file write left in the folder
        (:func:`.written_files.remove_killed_writes`), removed under the lock once the setup has passed its checks (at
        :meth:`clear_earlier_run`, or a resume with nothing to train): a resume refused after its claim (a bad line of
        metrics.jsonl) leaves the folder as it was."""
        if self.resumed:
            remove_killed_writes(self.path.parent, self.written_here)

    def record_written(self) -> None:
        """:func:`.written_files.record_written` for this run's folder: its metric logger's files, not those there
        before it."""
        record_written(self.path.parent, self.written_here, self.existed)

    def _written_holder(self) -> Tuple[Optional[int], Optional[str]]:
        return written_holder(self.path)

    def _holder(self) -> Tuple[Optional[int], Optional[str]]:
        return read_holder(self.path)

    def release(self, discard: bool = False) -> None:
        """Give the lock back; ``discard``: also remove the folder when this run made it and it holds only what
        the recipe writes (a run refused after claiming its folder leaves nothing behind, so the corrected rerun
        starts as the first would have)."""
        if self.held and self._holder()[0] == os.getpid():
            folder = self.path.parent
            # a folder this run made holds no one else's files in its log folders (their list may not be written yet:
            # a setup that failed, or a disk that filled, before it)
            if (discard and self.made_folder
                    and all(written_by_recipe(p.name, self.written_here) for p in folder.iterdir())
                    and not foreign_written(folder, tuple(n for n in self.written_here if n == HERE))):
                shutil.rmtree(folder)
                remove_made_folders(folder.parent, self.made_root)  # the parents it made, when empty
            else:  # listed: the run's logs, and a refused setup's (a logger that failed as it started) for overwrite
                if not discard or files_under(folder, self.written_here) - self.existed:
                    with contextlib.suppress(OSError):  # a full disk: the list the run's start wrote stands
                        self.record_written()
                # a folder made read-only keeps its lock file: the next start takes it over (its process is gone);
                # the error here hid the run's own last line under a traceback
                with folder_flock(folder), contextlib.suppress(OSError):  # no other start's lock between the two
                    touched = folder.stat().st_mtime_ns != self._made_at  # since the lock file: by whom, unknown
                    self.path.unlink(missing_ok=True)
                    if discard and self._marked_only(folder):  # an empty folder a refused setup only marked
                        (folder / MARKER).unlink()
                        self._put_back_mtime(folder)
                    elif not touched:
                        self._put_back_mtime(folder)
        self.held = False

    def _marked_only(self, folder: Path) -> bool:
        """Whether ``folder`` holds nothing but the marker this run wrote (it was not there when the lock was taken):
        a new run refused after its claim (a checkpoint that does not fit the model) left it in a folder that was
        empty, and the folder's mtime at that moment."""
        return (self._before is not None and MARKER not in self._before
                and [p.name for p in folder.iterdir()] == [MARKER])

    def _put_back_mtime(self, folder: Path) -> None:
        """The folder's mtime as it was before the lock file, when nothing else in it was added, removed or replaced
        since (a refused or a finished-already resume only made and removed the lock file, which set the folder's
        mtime to that moment) and its mtime is still the one the lock file's creation left (the caller's check: a
        user's `touch` of the folder, or a file another program made and removed there meanwhile, stands)."""
        now = _entries(folder)
        if self._before is None or now is None or self.made_folder:
            return
        (_, mtime), (atime, _) = self._before.pop(None), now.pop(None)
        if now == self._before:
            os.utime(folder, ns=(atime, mtime))


def _entries(folder: Path) -> Optional[dict]:
    """``folder``'s entries but its lock file (name: inode and mtime; a name added, removed or renamed over changes
    them) and, under None, the folder's own atime and mtime; None where it cannot be read."""
    try:
        entries = {e.name: (e.inode(), e.stat(follow_symlinks=False).st_mtime_ns) for e in os.scandir(folder)}
        st = folder.stat()
    except OSError:
        return None
    entries[None] = (st.st_atime_ns, st.st_mtime_ns)
    entries.pop(LOCK, None)
    return entries


def _check_aside(out: Path, written_here: Sequence[str]) -> None:
    """Refuse a file at any depth of ``out``'s :data:`REPLACED` or :data:`DISCARDED` (the earlier run a killed
    overwrite start set aside, or was deleting) that no run of the recipe writes (a user's file put there), by name
    and before the mend moves or deletes anything: one in :data:`REPLACED` was moved into the run folder, then named
    by the overwrite's refusal there; one in :data:`DISCARDED` was deleted with it."""
    for name, where in ((REPLACED, "sets the earlier run aside"), (DISCARDED, "deletes the earlier run it replaced")):
        aside = out / name
        if not aside.is_dir() or aside.is_symlink():
            continue
        stray = [f for f in foreign_entries(aside, written_here) if name == REPLACED or not _part_deleted(aside, f)]
        if stray:
            raise FileExistsError(
                f"output_dir={str(out)!r} holds {', '.join(repr(f'{name}/{n}') for n in stray[:3])}"
                f"{' ...' if len(stray) > 3 else ''}, which this recipe did not write, in the folder where an "
                f"overwrite start {where}: move it out of {str(aside)!r}, then start again")


def _part_deleted(aside: Path, found: str) -> bool:
    """Whether ``found`` (:func:`foreign_entries` of :data:`DISCARDED`) is what a deletion killed part-way leaves of
    the recipe's own files: a folder emptied before its removal (its list goes last), or a recipe state whose step
    folder went first (a plain ``recipe_state/step_<k>.pt``)."""
    path = aside / found.split(" (")[0].rstrip("/")
    if path.is_dir() and not path.is_symlink():
        return not any(path.iterdir())
    return (path.parent == aside / RECIPE_STATE_DIR and STATE_PATTERN.match(path.name) is not None
            and path.is_file() and not path.is_symlink())


def claim_output_dir(output_dir: PathLike, *, resume: bool, overwrite: bool, protect: Sequence[Input] = (),
                     written_here: Sequence[str] = (), max_steps: Optional[int] = None) -> "OutputDirLock":
    """Check the rules (before the lock file is written), take the folder's lock, then prepare a new folder
    (:func:`prepare_output_dir`). Returns the held lock; its ``made_folder`` says whether this call created the
    folder (:meth:`OutputDirLock.release` can then take it back). An earlier run that ``overwrite`` replaces stays
    until :meth:`OutputDirLock.clear_earlier_run`."""
    out = Path(output_dir)
    made, made_root = not out.exists(), missing_root(out)
    mend = out.is_dir() and any((out / n).is_dir() for n in (REPLACED, DISCARDED))  # an overwrite start killed
    rules = dict(resume=resume, overwrite=overwrite, protect=protect, written_here=written_here)
    if not mend:
        check_output_dir(out, **rules, max_steps=max_steps)
    lock = OutputDirLock(output_dir)
    lock.made_folder, lock.made_root = made, made_root
    try:  # a refusal or a full disk from here leaves no lock, marker or folder of this call's
        lock.acquire()
        if mend:  # under the lock: a live run's start in progress refuses
            _check_aside(out, written_here)
            mend_interrupted_start(out)
            check_output_dir(out, **rules, max_steps=max_steps)
        if not resume and not made and any(p.name != LOCK for p in out.iterdir()):  # allowed: overwrite
            lock.earlier_run = (tuple(protect), tuple(written_here))
        else:
            prepare_output_dir(output_dir, **rules, max_steps=max_steps)
    except BaseException:
        lock.release(discard=True)  # written_here not set yet: nothing there is listed as this run's
        if made:
            remove_made_folders(out, made_root)  # only when empty: made by acquire, which could not write its lock
        raise
    lock.written_here, lock.resumed = tuple(written_here), resume
    lock.existed = files_under(output_dir, written_here)  # a resumed run's: never listed as its own
    return lock
