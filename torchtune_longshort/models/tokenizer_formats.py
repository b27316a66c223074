"""Tokenizer formats of a checkpoint folder: the files of each, detected in a folder, and the class that loads it.

=============  ==============================================  =============================================
format         files                                           loaded with
=============  ==============================================  =============================================
sentencepiece  ``tokenizer.model`` (a SentencePiece model)     torchtune's ``SentencePieceBaseTokenizer``
tiktoken       ``original/tokenizer.model`` (Llama-3)          torchtune's ``llama3_tokenizer`` (special tokens
                                                               from ``tokenizer.json`` when it is there)
hf_json        ``tokenizer.json``                              the ``tokenizers`` library (what ``AutoTokenizer``
                                                               runs); BOS/EOS from ``tokenizer_config.json``,
                                                               else ``config.json`` / ``generation_config.json``
=============  ==============================================  =============================================


Every format is loaded as a :class:`~torchtune_longshort.models.source_tokenizers.SourceTokenizer`, a torchtune
``BaseTokenizer`` that follows the source model's BOS convention (:mod:`~torchtune_longshort.models.
source_tokenizers`).

Which formats a folder may hold, in the order tried, is its model family's (``families.ModelFamily.tokenizer_formats``);
:data:`DEFAULT_ORDER` is used for a tokenizer named on its own.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Dict, Optional, Sequence, Tuple, Union

from torchtune_longshort.models.families import family_of
from torchtune_longshort.models.family_builders import UnsupportedModelError
from torchtune_longshort.models.hf_json_tokenizer import HFJsonTokenizer
from torchtune_longshort.models.source_tokenizers import (
    HF_CONFIG,
    SentencePieceTokenizer,
    SourceTokenizer,
    TiktokenTokenizer,
)
from torchtune_longshort.models.tokenizer_files import TokenizerError, read_json
from torchtune_longshort.rope.checkpoint_code import component_code

PathLike = Union[str, Path]
SP_FILE = "tokenizer.model"
TIKTOKEN_FILE = "original/tokenizer.model"
HF_JSON = "tokenizer.json"
DEFAULT_ORDER = ("sentencepiece", "hf_json", "tiktoken")
_TIKTOKEN_LINE = re.compile(rb"^[A-Za-z0-9+/=]+ \d+\s*$")


def _is_sentencepiece(path: Path) -> bool:
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        head = f.read(64)
    if _TIKTOKEN_LINE.match(head.split(b"\n", 1)[0] + b"\n"):
        return False
    try:
        import sentencepiece as spm

        spm.SentencePieceProcessor(model_file=str(path))
        return True
    except Exception:
        return False


def _is_tiktoken(path: Path) -> bool:
    if not path.is_file():
        return False
    with open(path, "rb") as f:
        first = f.readline()
    return bool(_TIKTOKEN_LINE.match(first))


@dataclass(frozen=True)
class TokenizerFormat:
    """A tokenizer format: the files that make it up (copied unchanged into every checkpoint folder the project
    writes), how to find its main file in a folder, and how to load it."""

    name: str
    files: Tuple[str, ...]
    find: Callable[[Path], Optional[Path]]
    load: Callable[[Path], SourceTokenizer]


def _find_sp(folder: Path) -> Optional[Path]:
    p = folder / SP_FILE
    return p if _is_sentencepiece(p) else None


def _find_tiktoken(folder: Path) -> Optional[Path]:
    for rel in (TIKTOKEN_FILE, SP_FILE):
        if _is_tiktoken(folder / rel):
            return folder / rel
    return None


def _find_json(folder: Path) -> Optional[Path]:
    p = folder / HF_JSON
    return p if p.is_file() else None


def _load_tiktoken(path: Path) -> SourceTokenizer:
    folder = path.parent.parent if path.parent.name == "original" else path.parent
    return TiktokenTokenizer(path, folder / HF_JSON)


TOKENIZER_FORMATS: Dict[str, TokenizerFormat] = {
    f.name: f
    for f in (
        TokenizerFormat("sentencepiece", (SP_FILE,), _find_sp, SentencePieceTokenizer),
        TokenizerFormat("tiktoken", (TIKTOKEN_FILE,), _find_tiktoken, _load_tiktoken),
        TokenizerFormat("hf_json", (HF_JSON, "vocab.json", "merges.txt", "added_tokens.json"), _find_json,
                        HFJsonTokenizer),
    )
}
# Files beside the tokenizer that AutoTokenizer / generate read; copied unchanged with the tokenizer.
COMPANION_FILES = (HF_CONFIG, "special_tokens_map.json", "generation_config.json", "chat_template.jinja")
TOKENIZER_FILES = tuple(dict.fromkeys(f for fmt in TOKENIZER_FORMATS.values() for f in fmt.files)) + COMPANION_FILES


def find_tokenizer(path: PathLike, order: Sequence[str] = DEFAULT_ORDER) -> Tuple[str, Path]:
    """``(format name, file)`` of the tokenizer ``path`` names: a folder (formats tried in ``order``) or a file
    (``tokenizer.json``, or a ``.model`` file told apart by content). :class:`TokenizerError` names what is
    accepted."""
    p = Path(path).expanduser()
    if p.is_file():
        if p.name.endswith(".json"):
            return "hf_json", p
        if _is_tiktoken(p):
            return "tiktoken", p
        if _is_sentencepiece(p):
            return "sentencepiece", p
        raise TokenizerError(f"tokenizer {str(p)!r} is neither a SentencePiece model, a tiktoken BPE file nor a "
                             "tokenizer.json: name a tokenizer file of one of these formats, or the folder holding it")
    if p.is_dir():
        for name in order:
            found = TOKENIZER_FORMATS[name].find(p)
            if found is not None:
                return name, found
    raise TokenizerError(
        f"no tokenizer at {str(p)!r}: expected a folder holding one of "
        f"{', '.join(f'{n} ({TOKENIZER_FORMATS[n].files[0]})' for n in order)}, or such a file"
    )


def has_tokenizer(folder: PathLike, order: Sequence[str] = DEFAULT_ORDER) -> bool:
    try:
        find_tokenizer(folder, order)
        return True
    except TokenizerError:
        return False


def load_tokenizer(path: PathLike, order: Sequence[str] = DEFAULT_ORDER) -> SourceTokenizer:
    """The :class:`SourceTokenizer` of a folder or file (see :func:`find_tokenizer`)."""
    name, file = find_tokenizer(path, order)
    return TOKENIZER_FORMATS[name].load(file)


# How checkpoint_tokenizer's caller trusts the code its folder names (torchtune's own recipes: no reader's gate).
TOKENIZER_FIX = ("tokenizer.trust_remote_code=true (checkpoint_tokenizer's argument; from Python, "
                 "trust_remote_code=True)")


def checkpoint_tokenizer(path: str, max_seq_len: Optional[int] = None, parse_special_tokens: bool = False,
                         prompt_template: Any = None, trust_remote_code: Optional[bool] = None,
                         **_: Any) -> SourceTokenizer:
    """Config component: the tokenizer of a checkpoint folder (or a tokenizer file), format detected::

        tokenizer:
          _component_: torchtune_longshort.models.checkpoint_tokenizer
          path: ${checkpoint_dir}

    A folder's model family decides the order formats are tried in when its ``config.json`` names a known one.
    ``max_seq_len`` is kept as an attribute, as torchtune's tokenizers keep it: its packed datasets read it (the
    long-short recipe packs documents itself and ignores it).

    ``parse_special_tokens`` is false here, unlike every other loader: training text is text, as torchtune's own
    tokenizers and the models' reference encoders read it, so a document holding ``<s>`` or ``</s>`` (an HTML
    strike-through, the regex group ``(?P<s>...)`` of the stdlib corpus) gets no BOS / EOS in its middle, whatever
    the tokenizer's format. ``parse_special_tokens: true`` gives ``AutoTokenizer``'s ids (chat-templated training
    text that should map ``<s>`` / ``<|eot_id|>`` to their ids); evaluation always does
    (:mod:`~torchtune_longshort.models.source_tokenizers`).

    It is also torchtune's model tokenizer (``tune run generate``, ``chat_dataset``): called on ``{"messages":
    [...]}`` it formats them with the folder's chat template, or with torchtune's ``prompt_template`` when one is
    given (a dotted path or a dict, as torchtune's tokenizers take it), and reports ``stop_tokens``
    (:mod:`~torchtune_longshort.models.chat_messages`).

    A family of one's own the folder's ``config.json`` names (a dotted path) is imported only when trusted
    (``trust_remote_code: true``; inside the recipe's config check or ``longshort-eval``, as they read it: README,
    "Code a checkpoint names"), as :func:`~torchtune_longshort.models.load_hf_checkpoint` imports it."""
    p = Path(path).expanduser()
    order = DEFAULT_ORDER
    with component_code(trust_remote_code, TOKENIZER_FIX):
        if p.is_dir() and (p / "config.json").is_file():
            try:
                order = family_of(read_json(p / "config.json"), str(p / "config.json")).tokenizer_formats
            except UnsupportedModelError:
                pass
        tok = load_tokenizer(p, order)
    tok.max_seq_len = max_seq_len
    tok.parse_special_tokens = bool(parse_special_tokens)
    if prompt_template is not None:
        from torchtune.data._prompt_templates import _get_prompt_template

        tok.prompt_template = _get_prompt_template(prompt_template)
    return tok
