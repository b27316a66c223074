"""The tokenizer files of a checkpoint folder (:mod:`torchtune_longshort.models.hf_checkpoint` owns the folder).

Every folder this project writes carries its tokenizer, so that torchtune, ``AutoTokenizer`` and
``lm-eval --model hf --model_args pretrained=DIR`` load it with nothing else.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Union

PathLike = Union[str, Path]
logger = logging.getLogger(__name__)

SP_MODEL = "tokenizer.model"
# What AutoTokenizer reads; copied when the source has them, generated from a SentencePiece model otherwise.
TOKENIZER_FILES = (SP_MODEL, "tokenizer.json", "tokenizer_config.json", "special_tokens_map.json")


def has_tokenizer(folder: PathLike) -> bool:
    """Whether ``folder`` holds a tokenizer torchtune or transformers can load (``tokenizer.model`` or
    ``tokenizer.json``)."""
    return any((Path(folder) / f).is_file() for f in (SP_MODEL, "tokenizer.json"))


def copy_tokenizer(source: PathLike, out_dir: PathLike) -> None:
    """Put a tokenizer into a checkpoint folder so torchtune, ``AutoTokenizer`` and lm-eval's ``hf`` all load it.

    ``source`` is a ``tokenizer.model`` file or a folder. The files of :data:`TOKENIZER_FILES` found beside it are
    copied; a SentencePiece ``tokenizer.model`` without ``tokenizer.json`` gets transformers' files written
    (``LlamaTokenizer(..., add_bos_token=True).save_pretrained``, whose ids match SentencePiece's).
    """
    src = Path(source)
    src_dir = src if src.is_dir() else src.parent
    if not src.exists():
        raise FileNotFoundError(f"tokenizer source {str(src)!r} does not exist")
    out_dir = Path(out_dir)
    found = [f for f in TOKENIZER_FILES if (src_dir / f).is_file()]
    if src.is_file() and src.name != SP_MODEL:  # a SentencePiece model under another name
        shutil.copyfile(src, out_dir / SP_MODEL)
    if not found and not (out_dir / SP_MODEL).is_file():
        raise FileNotFoundError(f"tokenizer source {str(src)!r} holds none of {list(TOKENIZER_FILES)}")
    for f in found:
        if (src_dir / f).resolve() != (out_dir / f).resolve():
            shutil.copyfile(src_dir / f, out_dir / f)
    if not (out_dir / "tokenizer.json").is_file():
        try:
            write_hf_tokenizer_files(out_dir)
        except Exception as e:  # e.g. a tiktoken tokenizer.model, which LlamaTokenizer cannot read
            logger.warning(
                "%s: could not write transformers' tokenizer files from %s (%s: %s); torchtune and the longshort "
                "model load this folder, AutoTokenizer needs tokenizer.json beside it", out_dir, src, type(e).__name__, e
            )


def write_hf_tokenizer_files(folder: PathLike) -> None:
    """Write transformers' tokenizer files next to a SentencePiece ``tokenizer.model``.

    ``AutoTokenizer`` on a folder with only ``tokenizer.model`` gives wrong ids in transformers 5;
    ``LlamaTokenizer(..., add_bos_token=True).save_pretrained`` writes a ``tokenizer.json`` that matches.
    """
    import sentencepiece as spm
    from transformers import LlamaTokenizer

    # transformers builds *a* tokenizer even from a file that is not SentencePiece; refuse such a file first.
    spm.SentencePieceProcessor(model_file=str(Path(folder) / SP_MODEL))
    tok = LlamaTokenizer.from_pretrained(str(folder), add_bos_token=True)
    tok.save_pretrained(str(folder))
