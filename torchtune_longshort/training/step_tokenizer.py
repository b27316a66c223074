"""Where a step folder that lost its tokenizer files can take them back from: the fix a resume refusal names.

Every ``step_<k>`` of a run holds the same tokenizer files, copied unchanged from the run's tokenizer source
(``tokenizer.path``, else the start ``checkpoint_dir``: :func:`~torchtune_longshort.training.recipe_checkpoints.
tokenizer_source`), so another step folder of the run, else that source as the run's saved config names it, holds
the files a step lost (deleted to save room, or by a cleanup that took ``tokenizer.*``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, Optional, Sequence

from torchtune_longshort.models.hf_tokenizer import _source_root
from torchtune_longshort.models.tokenizer_formats import SP_FILE, TOKENIZER_FILES, has_tokenizer


def saved_tokenizer_source(saved_config: Optional[Dict[str, Any]]) -> Optional[Path]:
    """The tokenizer source a run's saved config names (``tokenizer.path``, else ``checkpointer.checkpoint_dir``)."""
    config = saved_config or {}
    path = (config.get("tokenizer") or {}).get("path") or (config.get("checkpointer") or {}).get("checkpoint_dir")
    return Path(str(path)).expanduser() if path else None


def _files_to_copy(folder: Path, source: Path) -> Sequence[str]:
    root = _source_root(source)
    files = [rel for rel in TOKENIZER_FILES if (root / rel).is_file() and not (folder / rel).is_file()]
    if source.is_file() and source.name not in TOKENIZER_FILES:  # a SentencePiece model under another name
        files.append(f"{source.name} (as {SP_FILE})")
    return files


def lost_tokenizer_fix(folder: Path, others: Sequence[Path], saved_config: Optional[Dict[str, Any]]) -> Optional[str]:
    """What to do about a step folder of this run that holds no tokenizer: copy the files it lacks from ``others``
    (the run's other step folders, newest first) or from the saved config's tokenizer source, naming the folder that
    holds them; None when ``folder`` has a tokenizer (its fault is another)."""
    if has_tokenizer(folder):
        return None
    source = saved_tokenizer_source(saved_config)
    bare = sorted((p for p in others if p.is_dir() and not has_tokenizer(p)), key=lambda p: int(p.name.split("_")[1]))
    too = f" (and into {', '.join(p.name for p in bare)}, which lack them too)" if bare else ""
    for candidate, what in [(p, f"{p.name} of this run") for p in others] + [(source, "the run's tokenizer source")]:
        if candidate is None or not candidate.exists() or not (has_tokenizer(candidate)
                                                               or has_tokenizer(_source_root(candidate))):
            continue  # (a file: a tokenizer under another name, spm.model, which each step holds as tokenizer.model)
        files = _files_to_copy(folder, candidate)
        if files:
            return (f"to resume, copy {', '.join(files)} from {str(_source_root(candidate))!r} ({what}) into "
                    f"{str(folder)!r}{too}")
    where = f" (nor does the run's tokenizer source {str(source)!r})" if source else ""
    return (f"no other step of this run holds its tokenizer files{where}: put them back into {str(folder)!r}{too}, "
            "then resume")
