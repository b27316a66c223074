"""Step checkpoints that are written whole or not at all, and the output-directory rules of the recipe.

Layout of a run's ``output_dir``::

    step_0/            the start weights when training from scratch (checkpoint folder)
    step_20/           checkpoint folder (models.hf_checkpoint: config.json, shards + index, RoPE side file,
                       tokenizer) + recipe_state.pt
    step_40/
    latest             text file naming the newest complete step directory (informational)
    .staging/          where a checkpoint is written before it is renamed into place

A checkpoint is first written completely under ``.staging/`` (by ``models.hf_checkpoint.write_hf_checkpoint``),
then moved to ``step_<k>`` with one ``os.rename``, which is atomic on POSIX file systems. A run
killed while saving therefore leaves only a stale staging folder, which the next save or resume discards; every
``step_<k>`` folder is complete, and :meth:`StepCheckpoints.latest` picks the newest.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path
from typing import Any, List, Optional, Sequence, Union

import torch

PathLike = Union[str, Path]
RECIPE_STATE = "recipe_state.pt"
STEP_PATTERN = re.compile(r"^step_(\d+)$")  # a checkpoint folder's name; the study reads it too


MARKER = ".longshort_output"  # written into every output_dir this recipe creates; overwrite needs it
LOCK = ".lock"


def prepare_output_dir(
    output_dir: PathLike, *, resume: bool, overwrite: bool, protect: Sequence[PathLike] = ()
) -> Path:
    """Check the output directory rules before anything is built or written.

    - ``resume``: the folder must hold at least one complete, resumable ``step_<k>`` checkpoint.
    - otherwise an existing, non-empty folder is an error unless ``overwrite`` is set. ``overwrite`` deletes only
      a folder this recipe made (it holds :data:`MARKER`), never the working directory, ``$HOME``, a git work tree
      or a folder holding one of ``protect`` (the start checkpoint, the tokenizer).

    Returns the folder as a Path (created, with its marker, if needed).
    """
    out = Path(output_dir)
    check_output_dir(out, resume=resume, overwrite=overwrite, protect=protect)
    if resume:
        return out
    if out.exists() and any(p.name != LOCK for p in out.iterdir()):
        for child in out.iterdir():  # this run's own lock stays
            if child.name == LOCK:
                continue
            shutil.rmtree(child) if child.is_dir() and not child.is_symlink() else child.unlink()
    out.mkdir(parents=True, exist_ok=True)
    (out / MARKER).write_text("made by torchtune_longshort's recipe; overwrite_output_dir=True may delete this folder\n")
    return out


def check_output_dir(output_dir: PathLike, *, resume: bool, overwrite: bool, protect: Sequence[PathLike] = ()) -> None:
    """The rules of :func:`prepare_output_dir`, checked without touching anything."""
    out = Path(output_dir)
    if resume:
        if StepCheckpoints(out).latest(resumable=True) is None:
            raise FileNotFoundError(
                f"resume=True but output_dir={str(out)!r} holds no complete step_<k> checkpoint with "
                f"{RECIPE_STATE} to resume from (a run killed before its first save leaves only step_0: start it "
                "again with overwrite_output_dir=True)"
            )
        return
    if out.exists() and any(p.name != LOCK for p in out.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"output_dir={str(out)!r} exists and is not empty; refusing to write over it. Pass resume=True to "
                "continue that run, overwrite_output_dir=True to replace it, or choose another output_dir"
            )
        _check_deletable(out, protect)


def _check_deletable(out: Path, protect: Sequence[PathLike]) -> None:
    real = out.resolve()
    refuse = None
    if real in (Path.cwd().resolve(), Path.home().resolve(), Path(real.anchor)):
        refuse = "it is the working directory, $HOME or a filesystem root"
    elif (real / ".git").exists():
        refuse = "it is a git work tree"
    elif not (real / MARKER).is_file():
        refuse = f"this recipe did not make it (no {MARKER} marker)"
    else:
        for p in protect:
            p = Path(p).resolve()
            if p == real or real in p.parents:
                refuse = f"it holds {p}, which this run reads"
                break
    if refuse:
        raise FileExistsError(
            f"overwrite_output_dir=True refuses to delete output_dir={str(out)!r}: {refuse}. Choose another "
            "output_dir, or delete the folder yourself"
        )


class OutputDirLock:
    """An exclusive lock on an output folder: a ``.lock`` file holding the owner's PID, created with O_EXCL.

    A lock whose PID is no longer alive (a killed run) is taken over; a live one refuses the second writer with a
    message naming the holder.
    """

    def __init__(self, output_dir: PathLike):
        self.path = Path(output_dir) / LOCK
        self.held = False

    def acquire(self) -> "OutputDirLock":
        self.path.parent.mkdir(parents=True, exist_ok=True)
        for _ in range(2):
            try:
                fd = os.open(str(self.path), os.O_CREAT | os.O_EXCL | os.O_WRONLY)
            except FileExistsError:
                holder = self._holder()
                if holder is not None and _pid_alive(holder):
                    raise RuntimeError(
                        f"output_dir={str(self.path.parent)!r} is in use by another run (PID {holder}, {self.path}); "
                        "wait for it, or choose another output_dir"
                    ) from None
                self.path.unlink(missing_ok=True)  # stale: its process is gone
                continue
            with os.fdopen(fd, "w") as f:
                f.write(f"{os.getpid()}\n")
            self.held = True
            return self
        raise RuntimeError(f"could not take the lock {self.path}")

    def _holder(self) -> Optional[int]:
        try:
            return int(self.path.read_text().strip() or "0") or None
        except (OSError, ValueError):
            return None

    def release(self) -> None:
        if self.held and self._holder() == os.getpid():
            self.path.unlink(missing_ok=True)
        self.held = False


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def claim_output_dir(output_dir: PathLike, *, resume: bool, overwrite: bool, protect: Sequence[PathLike] = ()
                     ) -> "OutputDirLock":
    """Check the rules (before the lock file is written), take the folder's lock, then prepare the folder
    (:func:`prepare_output_dir`). Returns the held lock."""
    check_output_dir(output_dir, resume=resume, overwrite=overwrite, protect=protect)
    lock = OutputDirLock(output_dir).acquire()
    prepare_output_dir(output_dir, resume=resume, overwrite=overwrite, protect=protect)
    return lock


class StepCheckpoints:
    """Find, stage and commit ``step_<k>`` checkpoints under ``output_dir`` (see module doc)."""

    def __init__(self, output_dir: PathLike):
        self.root = Path(output_dir)
        self.staging_root = self.root / ".staging"

    def steps(self, resumable: bool = False) -> List[int]:
        """Steps of the complete checkpoints (every file the folder's index names is there), ascending;
        ``resumable``: only those that also hold ``recipe_state.pt`` (``step_0`` of a run from scratch does not)."""
        from torchtune_longshort.models.hf_checkpoint import check_checkpoint_folder

        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = STEP_PATTERN.match(p.name)
            if not (m and p.is_dir()) or (resumable and not (p / RECIPE_STATE).is_file()):
                continue
            try:
                check_checkpoint_folder(p)
            except (FileNotFoundError, ValueError):
                continue
            found.append(int(m.group(1)))
        return sorted(found)

    def path(self, step: int) -> Path:
        return self.root / f"step_{step}"

    def latest(self, resumable: bool = False) -> Optional[Path]:
        """The newest complete (``resumable``: and resumable) checkpoint folder, or None."""
        s = self.steps(resumable)
        return self.path(s[-1]) if s else None

    def clean_staging(self) -> None:
        """Discard what a killed save left behind."""
        if self.staging_root.exists():
            shutil.rmtree(self.staging_root)

    def commit(self, staged: Path, step: int) -> Path:
        """Move a fully written staging folder to ``step_<step>`` atomically, then update ``latest``."""
        final = self.path(step)
        if final.exists():
            # Only reachable when a run is resumed from an older step and saves this step again: replace it by
            # renaming the old one aside first, so a kill between the two renames still leaves a complete copy.
            old = self.staging_root / f"old_step_{step}"
            os.rename(final, old)
            os.rename(staged, final)
            shutil.rmtree(old)
        else:
            os.rename(staged, final)
        _fsync_dir(self.root)
        atomic_write_text(self.root / "latest", final.name + "\n")
        return final


def atomic_write_text(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` via a temporary file and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def atomic_torch_save(obj: Any, path: Path) -> None:
    """``torch.save`` through a temporary file and ``os.replace``."""
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(str(path), os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
