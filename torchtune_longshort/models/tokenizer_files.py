"""What a tokenizer folder's JSON files are read as (``tokenizer_config.json``, ``generation_config.json``, ...), for
the tokenizer formats and the chat-message format alike, and the error a folder that cannot be read raises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional

# transformers' named special tokens (SpecialTokensMixin.SPECIAL_TOKENS_ATTRIBUTES)
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


class TokenizerError(ValueError):
    """No tokenizer of a supported format where one was expected, or one that cannot be read."""


def read_json(path: Path) -> Dict[str, Any]:
    """The JSON file ``path`` beside a tokenizer as a dict (``{}`` when there is none); :class:`TokenizerError`
    naming the file when it is not JSON."""
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise TokenizerError(f"{path}: not valid JSON ({e})") from None


def token_of(value: Any) -> Optional[str]:
    """The text of a named token as a tokenizer config writes it: a string, or an ``AddedToken`` dict's ``content``."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def named_tokens(folder: Path) -> Dict[str, str]:
    """``{name: text}`` of the :data:`NAMED_TOKENS` the folder's ``tokenizer_config.json`` names (over
    ``special_tokens_map.json``), those set to a token only: the ``special_tokens_map`` a transformers tokenizer
    loaded from the folder holds, which ``apply_chat_template`` hands its template."""
    cfg = {**read_json(folder / "special_tokens_map.json"), **read_json(folder / "tokenizer_config.json")}
    return {k: t for k in NAMED_TOKENS if (t := token_of(cfg.get(k))) is not None}
