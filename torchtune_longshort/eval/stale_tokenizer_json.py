"""A step folder whose ``tokenizer.json`` was written before the fix for SentencePiece models without the dummy
prefix (``add_dummy_prefix: false``, as Gemma's): that file's normalizer prepends ``▁`` anyway, so ``AutoTokenizer``
(lm-eval's ``--model hf``) encodes ``hello`` as ``[▁h, el, lo]`` where the run trained on SentencePiece's
``[h, el, lo]``. The recipe now writes a file that gives SentencePiece's ids; a folder written before keeps the old
one. :func:`warn_stale_tokenizer_json` finds it by encoding one probe text both ways, and says in one line how to
rewrite the file (``longshort`` reads ``tokenizer.model`` itself: it is not affected)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Dict, Optional

from torchtune_longshort.models.added_tokens import adds_dummy_prefix
from torchtune_longshort.models.tokenizer_formats import HF_JSON, SP_FILE

logger = logging.getLogger(__name__)

PROBE = "hello world"  # a text led by a word: the dummy prefix decides its first piece


def stale_tokenizer_json(folder: Path) -> Optional[str]:
    """Why ``folder``'s ``tokenizer.json`` encodes :data:`PROBE` otherwise than its SentencePiece
    ``tokenizer.model`` without the dummy prefix (None when it agrees, or is no such folder). A model with the
    dummy prefix is not probed (the file the recipe writes for it did not change): no cost for a Llama-2 folder."""
    model = folder / SP_FILE
    if not (model.is_file() and (folder / HF_JSON).is_file()):
        return None
    try:
        if adds_dummy_prefix(model.read_bytes()):
            return None
        import sentencepiece as spm
        from transformers import AutoTokenizer

        want = spm.SentencePieceProcessor(model_file=str(model)).encode(PROBE)
        got = AutoTokenizer.from_pretrained(str(folder)).encode(PROBE, add_special_tokens=False)
    except Exception:  # noqa: BLE001 -- no SentencePiece model, or a folder transformers cannot read: its to say
        return None
    if list(got) == list(want):
        return None
    return (f"its tokenizer.json encodes {PROBE!r} as {list(got)}, where its {SP_FILE} (SentencePiece without the "
            f"dummy prefix, what a run trained on) gives {want}: a tokenizer.json written before torchtune-longshort "
            "wrote one for such a model, so --model hf reads other tokens than the model was trained on; rewrite it "
            f"(python -c \"from torchtune_longshort.models import write_hf_tokenizer_files; "
            f"write_hf_tokenizer_files('{folder}')\"), or evaluate with --model longshort, which reads {SP_FILE}")


def warn_stale_tokenizer_json(model_args: Dict[str, Any]) -> Optional[str]:
    """Warn (one line) where the folder ``--model hf`` takes its tokenizer from (``tokenizer=``, else
    ``pretrained=``) holds a stale ``tokenizer.json`` (:func:`stale_tokenizer_json`); returns the line."""
    key = "tokenizer" if model_args.get("tokenizer") else "pretrained"
    if not model_args.get(key):
        return None
    folder = Path(str(model_args[key])).expanduser()
    why = stale_tokenizer_json(folder) if folder.is_dir() else None
    if why is None:
        return None
    line = f"--model_args {key}={model_args[key]}: {why}"
    logger.warning(line)
    return line
