"""What a tokenizer folder's JSON files are read as (``tokenizer_config.json``, ``generation_config.json``, ...), for
the tokenizer formats and the chat-message format alike, and the error a folder that cannot be read raises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict, Optional, Tuple

# transformers' named special tokens (SpecialTokensMixin.SPECIAL_TOKENS_ATTRIBUTES)
NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
TOKENIZER_CONFIG, SPECIAL_TOKENS_MAP = "tokenizer_config.json", "special_tokens_map.json"


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
        raise TokenizerError(f"{path}: not valid JSON ({e}): copy it from the checkpoint again") from None


def token_of(value: Any) -> Optional[str]:
    """The text of a named token as a tokenizer config writes it: a string, or an ``AddedToken`` dict's ``content``."""
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


def token_settings(folder: Path) -> Dict[str, Tuple[Any, str]]:
    """``{name: (value, file)}`` of the :data:`NAMED_TOKENS` the folder's files set, as transformers 5 reads them
    (``PreTrainedTokenizerBase._from_pretrained``): ``tokenizer_config.json``'s, and where that file has no
    ``added_tokens_decoder`` (one saved before transformers 4.34, or by hand) ``special_tokens_map.json``'s over
    them. ``value`` as written (a string, an ``AddedToken`` dict, or None: declared absent); ``file`` the one whose
    value counts. The one reader of those two files' named tokens (the tokenizer's BOS / EOS / pad, a chat
    template's ``special_tokens_map``)."""
    config = read_json(folder / TOKENIZER_CONFIG)
    files = [(TOKENIZER_CONFIG, config)]
    if "added_tokens_decoder" not in config:
        files.append((SPECIAL_TOKENS_MAP, read_json(folder / SPECIAL_TOKENS_MAP)))
    settings = {k: (values[k], name) for name, values in files for k in NAMED_TOKENS if k in values}  # the last wins
    return {k: settings[k] for k in NAMED_TOKENS if k in settings}


def unread_token_settings(folder: Path) -> Dict[str, Any]:
    """The named tokens ``special_tokens_map.json`` sets that :func:`token_settings` does not read (transformers does
    not read the file where ``tokenizer_config.json`` has ``added_tokens_decoder``), for a message to name them."""
    if "added_tokens_decoder" not in read_json(folder / TOKENIZER_CONFIG):
        return {}
    return {k: v for k, v in read_json(folder / SPECIAL_TOKENS_MAP).items() if k in NAMED_TOKENS}


def named_tokens(folder: Path) -> Dict[str, str]:
    """``{name: text}`` of the :data:`NAMED_TOKENS` the folder sets to a token (:func:`token_settings`): the
    ``special_tokens_map`` a transformers tokenizer loaded from the folder holds, which ``apply_chat_template`` hands
    its template."""
    return {k: t for k, (value, _) in token_settings(folder).items() if (t := token_of(value)) is not None}
