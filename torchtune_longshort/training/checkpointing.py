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

import json
import os
import re
import shutil
from pathlib import Path
from typing import Any, Dict, List, Optional, Union

import torch

PathLike = Union[str, Path]
RECIPE_STATE = "recipe_state.pt"
_STEP_RE = re.compile(r"^step_(\d+)$")


def prepare_output_dir(output_dir: PathLike, *, resume: bool, overwrite: bool) -> Path:
    """Check the output directory rules before anything is built or written.

    - ``resume``: the folder must hold at least one complete ``step_<k>`` checkpoint.
    - otherwise an existing, non-empty folder is an error unless ``overwrite`` is set (then it is emptied).

    Returns the folder as a Path (created if needed).
    """
    out = Path(output_dir)
    if resume:
        if StepCheckpoints(out).latest(resumable=True) is None:
            raise FileNotFoundError(
                f"resume=True but output_dir={str(out)!r} holds no complete step_<k> checkpoint with "
                f"{RECIPE_STATE} to resume from (a run killed before its first save leaves only step_0: start it "
                "again with overwrite_output_dir=True)"
            )
        return out
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(
                f"output_dir={str(out)!r} exists and is not empty; refusing to write over it. Pass resume=True to "
                "continue that run, overwrite_output_dir=True to replace it, or choose another output_dir"
            )
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    return out


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
            m = _STEP_RE.match(p.name)
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
