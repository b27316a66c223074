"""What ``overwrite_output_dir=True`` may delete, and in what order: only a folder this recipe made
(:data:`~.output_aside.MARKER`) holding nothing the recipe does not write (:mod:`.written_files`), never one that holds
or lies inside an input of the run, the working directory, ``$HOME``, a git work tree or another run's output folder
(:func:`deletion_refusal`). :mod:`.output_dir` applies it before it deletes anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

from torchtune_longshort.home_folder import home_folder
from torchtune_longshort.training.checkpointing import (
    MANIFEST, RECIPE_STATE_DIR, RESTART, STEP_PATTERN, PathLike, StepCheckpoints,
)
from torchtune_longshort.training.output_aside import (
    LOCK, MARKER, REPLACED, nothing_written, user_tmp_folder as _user_tmp_folder,
)
from torchtune_longshort.training.written_files import (
    HERE, entries_of_another_kind, foreign_written, listed_files, written_by_recipe,
)

Input = Union[PathLike, Tuple[str, PathLike]]  # a path the run reads, or (the config field naming it, the path)


def deletion_rank(child: Path) -> int:
    """The order overwrite deletes a folder's entries in: recipe states, steps, the rest, the manifest, the marker."""
    return {RECIPE_STATE_DIR: 0, MANIFEST: 3, MARKER: 4}.get(child.name, 1 if STEP_PATTERN.match(child.name) else 2)


def _contains(folder: Path, path: Path) -> bool:
    return path == folder or folder in path.parents


def deletion_refusal(real: Path, protect: Sequence[Input], written_here: Sequence[str]) -> Optional[str]:
    """Why the resolved folder ``real`` may not be deleted (None: it may)."""
    place = _place_refusal(real, protect)
    if place:
        return place
    held = _held_refusal(real, written_here)
    return f"it holds {held}" if held else None


def holds_a_run(out: Path) -> bool:
    """Whether a new run in ``out`` writes over something (a run stopped in its setup left nothing to)."""
    return out.exists() and any(p.name != LOCK for p in out.iterdir()) and not nothing_written(out)


def overwrite_refusal(out: Path, protect: Sequence[Input] = (), written_here: Sequence[str] = ()) -> Optional[str]:
    """Why a run with ``overwrite_output_dir=True`` would refuse the folder ``out`` (the reason its refusal gives:
    "it holds 'notes.txt', which this recipe did not write"), checked without touching anything; None: it may write
    over it. A caller that passes the overwrite on a user's behalf (the study) says the fix in its own words."""
    if not out.is_dir() or not holds_a_run(out) or (out / REPLACED).is_dir():  # REPLACED: mended first, then checked
        return None
    return deletion_refusal(out.resolve(), protect, written_here)


def overwrite_advice(out: Path, protect: Sequence[Input], written_here: Sequence[str] = ()) -> str:
    """How to start a run the recipe made again with ``overwrite_output_dir=True`` so that the overwrite is taken: as
    is, or once what the user keeps there is moved out (named), or another ``output_dir`` where the folder is one the
    overwrite never deletes. A resume refused advised the overwrite alone, which a user's file there then refused."""
    return overwrite_blocked(out, protect, written_here) or RESTART


def overwrite_blocked(out: Path, protect: Sequence[Input], written_here: Sequence[str] = (),
                      other: bool = False) -> Optional[str]:
    """:func:`overwrite_advice` where ``overwrite_output_dir=True`` alone would be refused; None where it is taken.
    ``other``: a move-it-out advice also offers another ``output_dir`` (the advice for a folder overwrite never
    deletes is that already)."""
    real = out.resolve()
    place = _place_refusal(real, protect)
    if place:
        return f"choose another output_dir (overwrite_output_dir=True would not delete it: {place})"
    held = _held_refusal(real, written_here)
    if held:
        return (f"output_dir also holds {held}: move that out of it, then {RESTART}"
                f"{', or choose another output_dir' if other else ''}")
    return None


def _place_refusal(real: Path, protect: Sequence[Input]) -> Optional[str]:
    """Why the folder ``real`` is never deleted, whatever it holds (None: it may be, for what it holds)."""
    if real == Path(real.anchor):
        return "it is a filesystem root"
    try:
        cwd: Optional[Path] = Path.cwd().resolve()
    except FileNotFoundError:  # the working directory was deleted under us: nothing to protect there
        cwd = None
    if cwd is not None and _contains(real, cwd):
        return f"it contains the working directory {str(cwd)!r}"
    home = home_folder()  # None: no home to protect (HOME unset, a user id without one)
    if home is not None and _contains(real, home.resolve()):
        return f"it contains $HOME ({str(home.resolve())!r})"
    if (real / ".git").exists():
        return "it is a git work tree"
    if not (real / MARKER).is_file():
        return f"this recipe did not make it (no {MARKER} marker)"
    for item in protect:
        field, p = item if isinstance(item, tuple) else (None, item)
        p = Path(p).expanduser().resolve()
        what = f"{field}={str(p)!r}" if field else str(p)
        if _contains(real, p):
            return f"it holds {what}, which this run reads"
        if p in real.parents:
            return f"it lies inside {what}, which this run reads"
    return None


def _held_refusal(real: Path, written_here: Sequence[str]) -> Optional[str]:
    """What the folder ``real`` holds that the recipe did not write, which keeps an overwrite from deleting it (the
    clause after 'it holds'), or None."""
    nested = sorted(str(m.parent.relative_to(real)) for top in real.iterdir() if top.is_dir() and not top.is_symlink()
                    for m in top.glob(f"**/{MARKER}"))  # a link is not followed (its target: any tree, / too)
    if nested:  # e.g. a run whose output_dir was inside this run's step_<k>, its checkpoint_dir
        return f"{nested[0]!r}, the output folder of another run"
    foreign = foreign_entries(real, written_here)
    if foreign:
        return (f"{', '.join(repr(n) for n in foreign[:5])}{' ...' if len(foreign) > 5 else ''}, which this recipe "
                "did not write")
    return None


def foreign_entries(real: Path, written_here: Sequence[str]) -> List[str]:
    """What the run folder ``real`` (or the earlier run an overwrite start set aside in it) holds, at any depth,
    that the recipe did not write, as paths relative to it: top-level entries no run writes, a step or log folder's
    files its list does not name, a recipe state without its step, a user's entry in ``.staging``."""
    # an earlier run's log folder under another log_dir (it holds the MANIFEST only the recipe writes): checked as one
    written_here = [*written_here, *(p.name for p in real.iterdir() if p.is_dir() and not p.is_symlink()
                                     and (p / MANIFEST).is_file() and not written_by_recipe(p.name, written_here))]
    logged = {f.split("/", 1)[0] for f in listed_files(real) or ()} if HERE in written_here else set()  # log_dir = here
    foreign = sorted(p.name for p in real.iterdir() if p.name not in logged and (
        not written_by_recipe(p.name, written_here) or _user_tmp_folder(p)))
    foreign += entries_of_another_kind(real) + StepCheckpoints(real).foreign_files()  # a latest/; an eval in step_<k>
    foreign += foreign_written(real, written_here)  # e.g. notes kept beside the run's logs
    return list(dict.fromkeys(foreign))  # a file at the top is named once (log_dir = output_dir lists it twice)


def check_deletable(out: Path, protect: Sequence[Input], written_here: Sequence[str] = ()) -> None:
    """Refuse (FileExistsError naming the folder and why) where ``overwrite`` may not delete ``out``."""
    refuse = deletion_refusal(out.resolve(), protect, written_here)
    if refuse:
        raise FileExistsError(
            f"overwrite_output_dir=True refuses to delete output_dir={str(out)!r}: {refuse}. Choose another "
            "output_dir, or move what you keep out of it and delete the folder yourself"
        )
