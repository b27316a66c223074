"""Step checkpoints that are written whole or not at all (the output folder's rules: ``training.output_dir``).

Layout of a run's ``output_dir`` (torchtune's: the resumable state beside the model folders, not in them)::

    step_0/            the start weights when training from scratch (checkpoint folder)
    step_20/           checkpoint folder (models.hf_checkpoint: config.json, shards + index, RoPE side file,
                       tokenizer); a LoRA run's hold the merged weights and adapter/ (models.peft_adapter: PEFT's
                       adapter_model.safetensors + adapter_config.json)
    step_40/
    recipe_state/step_40.pt   what resuming from step_40 needs besides its weights (optimizer, LR schedule, data
                       position, RNGs); the newest ``keep`` of them are kept (default 1: torchtune's one state)
    latest             text file naming the newest complete step directory (informational)

A checkpoint is first written completely under ``.staging/`` (the folder and its recipe state), then moved to
``step_<k>`` with one ``os.rename``, which is atomic on POSIX file systems, and its state to ``recipe_state/``
(``os.replace``); older states are deleted only after that, and ``.staging/`` goes once empty. A run killed while
saving therefore leaves only a stale staging folder, which the next save discards (a state whose step folder was
committed is moved in: :func:`state_file`); every ``step_<k>`` folder is complete, and
:meth:`StepCheckpoints.latest` picks the newest (``resumable``: whose state is there too).
"""

from __future__ import annotations

import contextlib
import errno
import os
import pickle
import re
import shutil
import sys
from pathlib import Path
from typing import Callable, List, Optional, Union

import torch

from torchtune_longshort.config.values import UnwritablePath, refuses_writes
from torchtune_longshort.models.hf_checkpoint import check_checkpoint_folder
from torchtune_longshort.output_guard import atomic_write_text, read_names, write_names
from torchtune_longshort.refusals import RESTART
from torchtune_longshort.training.durable_save import fsync_dir
from torchtune_longshort.training.staging import (
    MANIFEST, STAGING, STARTED_PATTERN, STATE_PATTERN, foreign_in, own_staged, remove_listed,
    staged_state_path, started_mark, unlisted, without_list,
)
from torchtune_longshort.training.step_tokenizer import lost_tokenizer_fix
from torchtune_longshort.training.state_words import cut_short, said, unreadable_state, zero_filled

RECIPE_STATE_DIR = "recipe_state"  # beside the step folders; one file per kept step: step_<k>.pt
LATEST = "latest"  # the text file naming the newest complete step folder
STEP_PATTERN = re.compile(r"^step_(\d+)$")  # a checkpoint folder's name; the study reads it too

PathLike = Union[str, Path]


def saves_at(step: int, stop_at: int, max_steps: int, save_every: Optional[int]) -> bool:
    """Whether the recipe saves after ``step``: every ``save_every`` steps (default: only the last), at ``max_steps``,
    and at ``stop_at``, where this process ends (``stop_after_step``)."""
    return step % (save_every or max_steps) == 0 or step in (max_steps, stop_at)


def recipe_state_path(step_dir: PathLike) -> Path:
    """The resumable state of the checkpoint folder ``step_dir`` (``<output_dir>/recipe_state/step_<k>.pt``)."""
    step_dir = Path(step_dir)
    return step_dir.parent / RECIPE_STATE_DIR / f"{step_dir.name}.pt"


def state_file(step_dir: PathLike) -> Path:
    """Where the recipe state of ``step_dir`` is read from: :func:`recipe_state_path`, or, for a save killed between
    its step folder's commit and its state's move, the state it left staged (``.staging/step_<k>.pt``, complete: it
    is written as ``.tmp`` and renamed), when ``step_<k>/`` is committed (its :data:`MANIFEST`) and no staged copy of
    the folder is still there. That step was refused as a resume point ('step_4 is whole, but not its optimizer and
    data state'), its state beside it; :meth:`StepCheckpoints.clean_staging` moves it in."""
    step_dir = Path(step_dir)
    path = recipe_state_path(step_dir)
    staged_dir = step_dir.parent / STAGING / step_dir.name
    staged = staged_state_path(staged_dir)
    if (not os.path.lexists(path) and staged.is_file() and not staged.is_symlink()
            and (step_dir / MANIFEST).is_file() and not os.path.lexists(staged_dir)):
        return staged
    return path


def read_recipe_state(step_dir: PathLike, mmap: bool = False) -> dict:
    """The recipe state saved with the step folder ``step_dir`` (onto the CPU; ``mmap``: its tensors not read). A file
    that does not load as one is refused in one line naming it and torch's error, with what to do: it ended the resume
    in torch's traceback ('PytorchStreamReader failed reading zip archive: failed finding central directory ...', or
    for most lengths a state is cut at, 'OSError: [Errno 22] Invalid argument'), exit 1. Only a file that is cut
    short (:func:`~.state_words.cut_short`) is said to be, or one of zeros, not one of another format put in its
    place."""
    path = state_file(step_dir)
    try:
        # map_location: a one-GPU run saves its optimizer states as CUDA tensors; read onto the CPU, they go to each
        # parameter's device when the optimizer loads them
        return torch.load(path, map_location="cpu", weights_only=False, mmap=mmap)
    except (RuntimeError, EOFError, pickle.UnpicklingError, OSError, KeyError) as e:  # zeros: KeyError 'storages'
        if isinstance(e, PermissionError):
            raise unreadable_state(path, e) from e
        zeros = zero_filled(path)
        cut = "" if zeros else cut_short(path, e)
        if isinstance(e, OSError) and not (cut or zeros):
            raise  # a file that is not there: as the system says it
        cause = zeros or (f"{cut}: a file cut short by a copy or a full disk?" if cut else
                          f"torch.load: {type(e).__name__}: {said(e)}; another file put in its place?")
        raise ValueError(f"resume: {path} cannot be read as a recipe state ({cause}): put back the file the run "
                         f"saved, or start a new run from {Path(step_dir).name}'s weights with "
                         f"checkpoint_dir={str(step_dir)!r}") from e


class StepCheckpoints:
    """Find, stage and commit ``step_<k>`` checkpoints under ``output_dir`` (see module doc); ``keep``: how many of
    the newest recipe states are kept (the older ones are deleted as each new one is committed); ``restart``: how a
    run that saved no step starts again (the recipe's: :func:`.overwrite_rules.overwrite_advice` of its folder and
    inputs; default: with the overwrite alone, which a user's file there, or a folder overwrite never deletes,
    refuses)."""

    def __init__(self, output_dir: PathLike, keep: int = 1, restart: Optional[Callable[[], str]] = None):
        self.root = Path(output_dir)
        self.staging_root = self.root / STAGING
        self.keep = int(keep)
        self.restart = restart or (lambda: RESTART)

    def steps(self, resumable: bool = False) -> List[int]:
        """Steps of the complete checkpoints (every file the folder's index names is there), ascending;
        ``resumable``: only those whose recipe state is there too (``step_0`` of a run from scratch has none)."""
        if not self.root.is_dir():
            return []
        found = []
        for p in self.root.iterdir():
            m = STEP_PATTERN.match(p.name)
            try:
                if not (m and p.is_dir()) or (resumable and not state_file(p).is_file()):
                    continue
            except PermissionError as e:  # recipe_state/ without search access
                raise unreadable_state(recipe_state_path(p), e) from e
            try:
                check_checkpoint_folder(p)
            except (FileNotFoundError, ValueError):
                continue
            found.append(int(m.group(1)))
        return sorted(found)

    def path(self, step: int) -> Path:
        return self.root / f"step_{step}"

    def run_steps(self, through: Optional[int] = None, listed: bool = False) -> List[int]:
        """Steps of the complete step folders that are the run's, ascending: none past ``through`` (its ``max_steps``:
        a run never saves there; a resume leaves a user's ``step_9/`` beside 8 steps alone) but the one ``resume=True``
        continues from; ``listed``: only those holding the :data:`MANIFEST` the recipe's commit writes."""
        resumable = self.latest(resumable=True)
        return [k for k in self.steps() if (through is None or k <= through or self.path(k) == resumable)
                and (not listed or (self.path(k) / MANIFEST).is_file())]

    def why_not_resumable(self) -> Optional[str]:
        """Why the newest ``step_<k>`` folder past step 0 cannot be resumed from (not whole, or without its recipe
        state), with what to do instead; None when there is none. A resume refused for it said only that a run killed
        before its first save leaves step_0, and advised overwrite_output_dir=True, which deletes that step."""
        numbered = sorted((int(m.group(1)), p) for p in (self.root.iterdir() if self.root.is_dir() else ())
                          if (m := STEP_PATTERN.match(p.name)) and p.is_dir() and int(m.group(1)) > 0)
        lost = self.moved_step(numbered[-1][0] if numbered else 0)
        if lost:
            return lost
        if not numbered:
            return None
        folder = numbered[-1][1]
        try:
            check_checkpoint_folder(folder)
        except (FileNotFoundError, ValueError) as e:
            fix = lost_tokenizer_fix(folder, [p for _, p in reversed(numbered[:-1])] + [self.path(0)],
                                     self._saved_config(folder)) if "tokenizer" in str(e) else None
            return f"{folder.name} is not whole: {' '.join(str(e).split())}" + (f"; {fix}" if fix else "")
        return (f"{folder.name} is whole, but not its optimizer and data state {RECIPE_STATE_DIR}/{folder.name}.pt: "
                f"to train on from its weights, start a new run with checkpoint_dir={str(folder)!r}")

    def not_made_here(self) -> str:
        """Why a resume in a folder this recipe did not make is refused, and, where it holds a whole step folder
        (one copied there alone, without the run's recipe state), the new run its weights can start."""
        steps = self.steps()
        start = (f"; to train on from the weights of its {self.path(steps[-1]).name}, start a new run (another "
                 f"output_dir) with checkpoint_dir={str(self.path(steps[-1]))!r}") if steps else ""
        return f"this recipe did not make that folder: choose another output_dir, without resume=True{start}"

    @staticmethod
    def _saved_config(folder: Path) -> Optional[dict]:
        """The config saved in ``folder``'s recipe state, or None (no state, or one that does not load: what
        :func:`read_recipe_state` raises for a missing, forbidden or unreadable file, or a file holding no dict)."""
        try:
            state = read_recipe_state(folder, mmap=True)
        except (OSError, ValueError):  # any other error is a fault of ours: shown, not taken for "no config"
            return None
        return state.get("config") if isinstance(state, dict) else None

    def moved_step(self, after: int) -> Optional[str]:
        """A recipe state newer than step ``after`` whose ``step_<k>/`` is gone (not set aside by a save that replaces
        it): the folder renamed or moved (to keep it as 'best'), not a run that never saved nor an older step's
        missing state; what to put back, or None."""
        lost = [k for p in self.states() if (k := int(p.stem.split("_")[1])) > after and not self.path(k).exists()
                and not (self.staging_root / f"old_step_{k}").is_dir()]
        if not lost:
            return None
        return (f"{RECIPE_STATE_DIR}/step_{lost[-1]}.pt is there, but not its folder step_{lost[-1]}/: renamed or "
                f"moved? put it back as {str(self.path(lost[-1]))!r}, then resume")

    def latest(self, resumable: bool = False) -> Optional[Path]:
        """The newest complete (``resumable``: and resumable) checkpoint folder, or None."""
        s = self.steps(resumable)
        return self.path(s[-1]) if s else None

    def newest_state(self) -> Optional[dict]:
        """The recipe state of the newest resumable step (memory-mapped: its tensors are not read), or None: what a
        resume continues, for a config check to read (its ``config``) before the run claims the folder."""
        latest = self.latest(resumable=True)
        if latest is None:
            return None
        return read_recipe_state(latest, mmap=True)

    def standing(self) -> str:
        """What a run that ended early leaves, and how to go on: the last step saved whole, which resume=True
        continues from, or none (then the folder holds the run's start)."""
        last = self.latest(resumable=True)
        if last is not None:
            return f"the last saved step, {last}, stands; continue with resume=True"
        return f"no step of this run was saved; {self.restart()} (output_dir={str(self.root)!r} holds this run's start)"

    def clean_staging(self) -> None:
        """Discard what a killed save left behind: the entries the recipe writes in ``.staging/`` (a step folder
        being written or replaced, its staged state), never another (:meth:`foreign_staged`, refused before a run);
        a staged state whose step folder was committed (:func:`state_file`) is moved into ``recipe_state/``, a step
        folder set aside by a save that replaced it and was killed before the new one was in place is put back."""
        staging = self.staging_root
        if not staging.is_dir() or staging.is_symlink():
            return
        for p in [p for p in staging.iterdir() if p.name.startswith("old_") and own_staged(p)]:
            self._put_back(p)  # first: the staged state of the save it was replacing is then never moved in with it
        # told apart before any goes, each mark after its folder: a kill part-way leaves no folder of ours unmarked
        for p in sorted((p for p in staging.iterdir() if own_staged(p)), key=lambda p: p.name.endswith(".started")):
            if p.name.endswith(".pt") and state_file(self.root / p.stem) == p:  # a commit the kill cut: finish it
                recipe_state_path(self.root / p.stem).parent.mkdir(exist_ok=True)
                os.replace(p, recipe_state_path(self.root / p.stem))
                atomic_write_text(self.root / LATEST, p.stem + "\n")
                self._prune_states()  # last, as the commit's: a write failed before leaves the states `latest` names
                continue
            if p.is_dir():
                shutil.rmtree(p)
            elif not (STARTED_PATTERN.match(p.name) and os.path.lexists(p.with_suffix(""))):
                p.unlink()  # a mark whose folder stays (a user's file in it) stays with it: that folder is still ours
        if not any(staging.iterdir()):
            staging.rmdir()

    def _put_back(self, p: Path) -> None:
        """``.staging/old_step_<k>`` renamed back to ``step_<k>`` when that is gone and it is whole (every file its
        :data:`MANIFEST` lists): a save of that step killed between :meth:`commit`'s two renames set it aside, the
        only copy in place (the clean-up deleted it, and with it the step); the killed save's staged state goes
        first, so that it is not taken for the old folder's (:func:`state_file`)."""
        folder = self.root / p.name[len("old_"):]
        listed = read_names(p / MANIFEST)
        if os.path.lexists(folder) or listed is None or not all((p / rel).exists() for rel in listed):
            return
        staged_state_path(self.staging_root / folder.name).unlink(missing_ok=True)
        os.rename(p, folder)
        fsync_dir(self.root)

    def foreign_staged(self) -> List[str]:
        """What ``.staging/`` holds that the recipe does not write there (``.staging/<name>``; in a killed save's
        folder, each file no save writes: ``.staging/step_3/notes.txt``); ``.staging`` itself when it is a link or a
        file: :meth:`clean_staging` never deletes it, so a run that would clean it is refused first. A user file kept
        there was deleted without a word."""
        staging = self.staging_root
        if staging.is_symlink() or (staging.exists() and not staging.is_dir()):
            return [STAGING]
        if not staging.is_dir():
            return []
        return [f"{STAGING}/{name}" for p in sorted(staging.iterdir()) for name in foreign_in(p)]

    def commit(self, staged: Path, step: int) -> Path:
        """Move a fully written staging folder to ``step_<step>`` atomically and its staged recipe state (if any) to
        ``recipe_state/``, delete the states past the newest :attr:`keep`, update ``latest`` and remove the empty
        staging folder. A move the file system refuses (``chattr +i``, a permission, a read-only mount) is an
        :class:`~torchtune_longshort.config.values.UnwritablePath` in one line: which step stands and what to mend
        (its raw ``Operation not permitted`` named neither); a state that cannot follow its step folder is found
        before the folder moves, so no ``step_<k>`` is left without its state."""
        try:
            return self._commit(staged, step)
        except OSError as e:
            raise self.refused(step, e) from None

    def refused(self, step: int, error: OSError) -> OSError:
        """What a save of ``step`` that ``error`` stopped ends the run with: for a write the file system refuses
        (``chattr +i``, a permission, a read-only mount; at the commit, or at the staging before it) an
        :class:`~torchtune_longshort.config.values.UnwritablePath` in one line naming the step that stands, what it
        staged removed; any other error as it is."""
        if error.errno not in (errno.EPERM, errno.EACCES, errno.EROFS):
            return error
        with contextlib.suppress(OSError):
            self.clean_staging()
        last = self.latest(resumable=True)
        then = (f"continue with resume=True (the last saved step, {last}, stands)" if last is not None else
                f"{self.restart()} (no step of this run was saved)")
        return UnwritablePath(f"checkpoint step_{step} could not be saved ({' '.join(str(error).split())}): make what "
                              f"it names writable (chmod u+w; chattr -i if it is immutable), then {then}")

    def _commit(self, staged: Path, step: int) -> Path:
        final = self.path(step)
        state = staged_state_path(staged)
        if state.is_file():  # asked before the step folder moves in: one without its state is no resume point
            recipe_state_path(final).parent.mkdir(exist_ok=True)
            why = refuses_writes(recipe_state_path(final).parent)
            if why:
                raise PermissionError(errno.EPERM, why, str(recipe_state_path(final).parent))
        written = sorted(q.relative_to(staged).as_posix() for q in staged.rglob("*") if not q.is_dir())
        write_names(staged / MANIFEST, written)
        if final.exists():
            # Only reachable when a run is resumed from an older step and saves this step again: replace it by
            # renaming the old one aside first, so a kill between the two renames still leaves a complete copy.
            old = self.staging_root / f"old_step_{step}"
            # what the old one's list names goes; a user's file in it stays there, named by the next start
            os.rename(final, old)
            os.rename(staged, final)
            remove_listed(old)
            kept = [f"{STAGING}/{name}" for name in foreign_in(old)] if os.path.lexists(old) else []
            if kept:  # said now, not only at the next start: the run goes on and saves its step
                print(f"step_{step} was saved again over the one in output_dir={str(self.root)!r}; what the recipe "
                      f"did not write there is kept aside: {', '.join(kept)}: move it out (overwrite_output_dir and "
                      f"resume refuse this folder until then)", file=sys.stderr)
        else:
            os.rename(staged, final)
        moved = state.is_file()
        if moved:
            os.replace(state, recipe_state_path(final))
        started_mark(staged).unlink(missing_ok=True)  # its folder is in place: a kill before leaves it alone, ours
        fsync_dir(self.root)
        atomic_write_text(self.root / LATEST, final.name + "\n")
        if moved:  # once `latest` names the new step: a failed write of it leaves the state of the step it names
            self._prune_states()
        if self.staging_root.is_dir() and not any(self.staging_root.iterdir()):
            self.staging_root.rmdir()
        return final

    def foreign_files(self, resumable_only: bool = False, through: Optional[int] = None) -> List[str]:
        """Files under the step folders and ``recipe_state/`` that the recipe did not write (``step_<k>/<path>``),
        sorted: a step folder's are those its :data:`MANIFEST` does not list; a step folder without one (the recipe
        commits none without it: made by hand, or by a version before the list) is named whole, ``step_<k>/ (no
        .longshort_files)``. ``resumable_only``: only the step folders a run resumed now would write again (those
        newer than the step it resumes from, and, given ``through``, not past that step: a run never saves past its
        ``max_steps``; a user's ``step_5/`` beside a run of 2 steps was refused as one it would replace). A file or
        symbolic link named like a step folder is named too (``step_<k> (a file, not a step folder)``): overwrite
        deleted it, a resume moved it into ``.staging/``."""
        if not self.root.is_dir():
            return []
        start = self.latest(resumable=True) if resumable_only else None
        first = int(STEP_PATTERN.match(start.name).group(1)) + 1 if start is not None else 0
        out = []
        for p in sorted(self.root.iterdir()):
            m = STEP_PATTERN.match(p.name)
            if not m or int(m.group(1)) < first or (through is not None and int(m.group(1)) > through):
                continue
            if p.is_symlink() or not p.is_dir():  # the recipe commits step folders only: a file or link is a user's
                out.append(f"{p.name} ({'a symbolic link' if p.is_symlink() else 'a file, not a step folder'})")
                continue
            listed = read_names(p / MANIFEST)
            if listed is None:
                out.append(without_list(p))
                continue
            out += [f"{p.name}/{rel}" for rel in unlisted(p, listed)]
        states = self.root / RECIPE_STATE_DIR
        if not resumable_only and states.is_dir():  # a folder or link named as a state file is a user's too
            out += [f"{RECIPE_STATE_DIR}/{q.name}" + (" (not a state file)" if self._own_state(q.name) else "")
                    for q in sorted(states.iterdir()) if q.is_dir() or q.is_symlink() or not self._own_state(q.name)]
        return out + self.foreign_staged()  # a resume cleans .staging/ too

    def _own_state(self, name: str) -> bool:
        """A file of ``recipe_state/`` the recipe wrote: ``step_<k>.pt`` beside its committed ``step_<k>/`` (the state
        is moved in after its step folder), or a ``.tmp`` a killed write left."""
        m = STATE_PATTERN.match(name)
        return bool(m) and (m.group(2) is not None or (self.root / f"step_{m.group(1)}" / MANIFEST).is_file())

    def states(self) -> List[Path]:
        """The recipe states in ``recipe_state/``, oldest first."""
        states = self.root / RECIPE_STATE_DIR
        if not states.is_dir():
            return []
        kept = sorted((int(m.group(1)), p) for p in states.glob("step_*.pt") if (m := STEP_PATTERN.match(p.stem)))
        return [p for _, p in kept]

    def _prune_states(self) -> None:
        kept = self.states()
        for p in kept[: max(0, len(kept) - self.keep)]:
            p.unlink()

