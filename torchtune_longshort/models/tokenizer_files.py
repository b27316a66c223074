"""What a tokenizer folder's JSON files are read as (``tokenizer_config.json``, ``generation_config.json``, ...), for
the tokenizer formats and the chat-message format alike, and the error a folder that cannot be read raises."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Dict


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
