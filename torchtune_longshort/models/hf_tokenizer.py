"""The tokenizer files of a checkpoint folder (:mod:`torchtune_longshort.models.hf_checkpoint` owns the folder).

Every folder this project writes carries its source model's tokenizer files, unchanged and at the same relative
paths (:data:`~torchtune_longshort.models.tokenizer_formats.TOKENIZER_FILES`: ``tokenizer.model``,
``original/tokenizer.model``, ``tokenizer.json``, ``tokenizer_config.json``, ...), so that torchtune,
``AutoTokenizer`` and ``lm-eval --model hf --model_args pretrained=DIR`` load it with nothing else. Only a source that
is a bare SentencePiece model (no ``tokenizer.json``: a tokenizer trained here) gets transformers' files written
beside it.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import List, Union

from torchtune_longshort.models.added_tokens import adds_dummy_prefix
from torchtune_longshort.models.tokenizer_formats import (
    HF_JSON,
    SP_FILE,
    TIKTOKEN_FILE,
    TOKENIZER_FILES,
    _is_sentencepiece,
    has_tokenizer,
)

PathLike = Union[str, Path]
logger = logging.getLogger(__name__)

__all__ = ["copy_tokenizer", "has_tokenizer", "tokenizer_bytes", "write_hf_tokenizer_files", "SP_MODEL"]
SP_MODEL = SP_FILE


def _source_root(src: Path) -> Path:
    """The folder whose layout is copied: the folder itself, a file's folder, or the model folder above
    ``original/``."""
    if src.is_dir():
        return src
    return src.parent.parent if src.parent.name == "original" else src.parent


def copy_tokenizer(source: PathLike, out_dir: PathLike) -> List[str]:
    """Copy a tokenizer into a checkpoint folder; returns the relative paths written.

    ``source`` is a tokenizer folder (a checkpoint folder) or a tokenizer file. Every file of
    :data:`TOKENIZER_FILES` found there is copied unchanged to the same relative path; a tokenizer file under
    another name (a SentencePiece ``.model``) is copied as ``tokenizer.model``. A bare SentencePiece model gets
    transformers' ``tokenizer.json`` written from it (:func:`write_hf_tokenizer_files`: SentencePiece's ids under
    ``AutoTokenizer``); where that fails (not a SentencePiece model) a warning says ``AutoTokenizer`` will not load it.
    """
    src = Path(source)
    if not src.exists():
        raise FileNotFoundError(f"tokenizer source {str(src)!r} does not exist")
    root = _source_root(src)
    out_dir = Path(out_dir)
    written = []
    for rel in TOKENIZER_FILES:
        if (root / rel).is_file() and (root / rel).resolve() != (out_dir / rel).resolve():
            (out_dir / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(root / rel, out_dir / rel)
            written.append(rel)
    if src.is_file() and src.name not in (SP_FILE, HF_JSON) and not str(src).endswith(TIKTOKEN_FILE):
        shutil.copyfile(src, out_dir / SP_FILE)  # a SentencePiece model under another name
        written.append(SP_FILE)
    if not has_tokenizer(out_dir):
        raise FileNotFoundError(f"tokenizer source {str(src)!r} holds none of {list(TOKENIZER_FILES[:3])}")
    if not (out_dir / HF_JSON).is_file():
        try:
            write_hf_tokenizer_files(out_dir)
            written.append(HF_JSON)
        except Exception as e:  # e.g. a tiktoken tokenizer.model, which LlamaTokenizer cannot read
            logger.warning(
                "%s: could not write transformers' tokenizer files from %s (%s: %s); torchtune and the longshort "
                "model load this folder, AutoTokenizer needs tokenizer.json beside it", out_dir, src,
                type(e).__name__, e
            )
    return written


def tokenizer_bytes(source: PathLike) -> int:
    """Bytes :func:`copy_tokenizer` copies from ``source`` (the files it finds there; a ``tokenizer.json`` it would
    write for a bare SentencePiece model is not counted); 0 for a source that is not there."""
    src = Path(source)
    if not src.exists():
        return 0
    root = _source_root(src)
    found = [root / rel for rel in TOKENIZER_FILES if (root / rel).is_file()]
    if src.is_file() and src not in found:
        found.append(src)
    return sum(p.stat().st_size for p in found)


def write_hf_tokenizer_files(folder: PathLike) -> None:
    """Write transformers' tokenizer files next to a SentencePiece ``tokenizer.model``, giving SentencePiece's ids.

    ``AutoTokenizer`` on a folder with only ``tokenizer.model`` gives wrong ids in transformers 5, so
    ``LlamaTokenizer(..., add_bos_token=True).save_pretrained`` writes the vocabulary, merges, added tokens and BOS
    post-processor. Its pipeline is then replaced by the one of hub Llama-2's ``tokenizer.json``, which is
    SentencePiece's own: a normalizer that prepends ``▁`` and turns every space into ``▁``, no pre-tokenizer (the
    Metaspace pre-tokenizer transformers writes prepends no ``▁`` to a text that starts with a space, so
    ``" starts with space"`` lost a space), and ``tokenizer_class`` is ``PreTrainedTokenizerFast``, which runs the
    file as written (transformers 5's ``LlamaTokenizer`` builds that Metaspace pipeline whatever the file says).
    Each text between two special tokens gets its own ``▁``, as the hub Llama-2 file does (transformers' legacy
    behaviour); a model without SentencePiece's dummy prefix (``add_dummy_prefix: false``) gets none, and no
    ``Strip`` of the decoded text's first space.
    """
    import json

    from transformers import LlamaTokenizer

    # transformers builds *a* tokenizer even from a file that is not SentencePiece; refuse such a file first.
    if not _is_sentencepiece(Path(folder) / SP_FILE):
        raise ValueError(f"{Path(folder) / SP_FILE} is not a SentencePiece model")
    tok = LlamaTokenizer.from_pretrained(str(folder), add_bos_token=True, legacy=True)
    tok.save_pretrained(str(folder))
    spec_file, cfg_file = Path(folder) / HF_JSON, Path(folder) / "tokenizer_config.json"
    spec = json.loads(spec_file.read_text())
    prefix = adds_dummy_prefix((Path(folder) / SP_FILE).read_bytes())
    spec["normalizer"] = {"type": "Sequence", "normalizers": [{"type": "Prepend", "prepend": "\u2581"}] * prefix + [
        {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}]}
    spec["pre_tokenizer"] = None
    if not prefix:  # no dummy prefix to take off a decoded text: its Strip would eat a real leading space
        spec["decoder"]["decoders"] = [d for d in spec["decoder"]["decoders"] if d.get("type") != "Strip"]
    spec_file.write_text(json.dumps(spec, ensure_ascii=False, indent=2))
    cfg = json.loads(cfg_file.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg["legacy"] = True
    cfg.pop("add_prefix_space", None)
    cfg_file.write_text(json.dumps(cfg, ensure_ascii=False, indent=2))
