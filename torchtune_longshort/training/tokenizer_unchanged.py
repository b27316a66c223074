"""Whether the tokenizer a resumed run reads is still the one it trained with.

Every ``step_<k>`` holds the run's tokenizer files, copied unchanged from its source (``tokenizer.path``, else the
start ``checkpoint_dir``: :func:`~torchtune_longshort.training.recipe_checkpoints.tokenizer_source`). A resume reads
the tokenizer from that source again; one replaced meanwhile (retrained, another model's copied over) gives the
resumed weights token ids that meant other text, and the run trained on without a word, its next ``step_<k>``
holding the new tokenizer. The files that give the ids are compared byte for byte with the step's copies.
"""

from __future__ import annotations

import filecmp
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

from torchtune_longshort.models.hf_tokenizer import _source_root
from torchtune_longshort.training.bootstrap import trained_here
from torchtune_longshort.models.tokenizer_formats import HF_JSON, SP_FILE, TIKTOKEN_FILE, TOKENIZER_FORMATS

# the files a tokenizer's ids come from (not its companions: a chat template, generation settings)
ID_FILES = tuple(dict.fromkeys(f for fmt in TOKENIZER_FORMATS.values() for f in fmt.files))


def _source_of(config: Dict[str, Any]) -> Tuple[Optional[str], Optional[Path]]:
    """``(field, path)`` of the tokenizer source a config names: ``tokenizer.path``, else the start folder."""
    path = (config.get("tokenizer") or {}).get("path")
    if path:
        return "tokenizer.path", Path(str(path)).expanduser()
    start = (config.get("checkpointer") or {}).get("checkpoint_dir")
    return ("checkpointer.checkpoint_dir", Path(str(start)).expanduser()) if start else (None, None)


def _pairs(source: Path, step_dir: Path) -> List[Tuple[Path, Path]]:
    """(source file, the step's copy of it) for each id file both hold, as ``copy_tokenizer`` copied them."""
    root = _source_root(source)
    pairs = [(root / rel, step_dir / rel) for rel in ID_FILES]
    if source.is_file() and source.name not in (SP_FILE, HF_JSON) and not str(source).endswith(TIKTOKEN_FILE):
        pairs.append((source, step_dir / SP_FILE))  # a SentencePiece model under another name
    return [(a, b) for a, b in pairs if a.is_file() and b.is_file()]


def same_tokenizer(source: Path, step_dir: Path) -> bool:
    """Whether the tokenizer source ``source`` (a folder or file, where it lies now) is the one whose copies
    ``step_dir`` holds: it holds at least one id file, each with a copy in ``step_dir``, byte for byte the same (a
    tokenizer moved or copied as it was, :mod:`~torchtune_longshort.training.moved_sources`)."""
    root, pairs = _source_root(source), _pairs(source, Path(step_dir))
    lacked = [rel for rel in ID_FILES if (root / rel).is_file() and not (Path(step_dir) / rel).is_file()]
    return bool(pairs) and not lacked and all(filecmp.cmp(a, b, shallow=False) for a, b in pairs)


def check_tokenizer_unchanged(step_dir: Path, config: Dict[str, Any]) -> None:
    """Refuse (``ValueError``, one line naming the field and the file) a resume whose tokenizer source holds a file
    other than the copy in ``step_dir``, the step it resumes. A source that is gone, or holds none of the step's
    files, is not compared here (its load says what is missing)."""
    field, source = _source_of(config)
    if source is None or not source.exists():
        return
    for src, copy in _pairs(source, Path(step_dir)):
        if src.resolve() != copy.resolve() and not filecmp.cmp(src, copy, shallow=False):
            # a folder this run trained anew is removed with the refusal: the copy needs it made again
            put_back = f"{'mkdir -p ' + str(src.parent) + ' && ' if trained_here(src.parent) else ''}cp {copy} {src}"
            raise ValueError(
                f"resume=True with {field}={str(source)!r}: its {src} is not the tokenizer the run trained with "
                f"({copy}, copied from it when {Path(step_dir).name} was saved; replaced or retrained since?): the "
                f"resumed weights would read token ids that meant other text. Put the run's file back ({put_back}), or "
                "start a new run in another output_dir"
            )
