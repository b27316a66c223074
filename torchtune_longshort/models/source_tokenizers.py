"""One tokenizer interface over every tokenizer format of a checkpoint folder (:class:`SourceTokenizer`), and its
three implementations; which format a folder holds, and which class loads it, is
:data:`~torchtune_longshort.models.tokenizer_formats.TOKENIZER_FORMATS`'.

Every format is wrapped as a :class:`SourceTokenizer`, a torchtune ``BaseTokenizer`` (``encode(text, add_bos,
add_eos)`` / ``decode``) that follows the *source model's* BOS convention: ``add_bos=True`` puts BOS first exactly
when the model's own tokenizer does (``AutoTokenizer(folder).encode(text)``): Llama-2 and Llama-3 do, Qwen2 and
SmolLM2 do not. So a document packed for training, a perplexity sample and an lm-eval request start as the model
saw text in pre-training, and ``longshort`` encodes exactly as lm-eval's ``hf`` does. ``add_eos=True`` always
appends EOS (the document separator the packed stream needs).

Special-token strings in a text (``<s>``, ``</s>``, ``<|begin_of_text|>``, ``<|eot_id|>``, ...) follow
``parse_special_tokens``. True (the default of every loader, what the ``longshort`` eval model and the eval tasks
use): they get their ids exactly where ``AutoTokenizer`` cuts them, and the text around them the ids
``AutoTokenizer`` gives it (:mod:`~torchtune_longshort.models.added_tokens`), in every format; chat templates
(Llama-2-chat, Mistral-instruct) render ``<s>`` / ``</s>`` as text, and ``hf`` scores those ids. False (the recipe's
``checkpoint_tokenizer`` default): a text is only text, encoded by the model's own tokenizer (SentencePiece,
tiktoken, ``tokenizers`` with ``encode_special_tokens``), as torchtune's tokenizers and Llama's reference encoders
do, so that a training document holding ``<s>`` (an HTML strike-through, a regex group ``(?P<s>...)`` of the
stdlib corpus) gets no BOS in the middle of it.

torchtune's own ``HuggingFaceBaseTokenizer`` is not used for ``tokenizer.json``: it refuses a ``tokenizer_config.json``
whose ``bos_token`` is null (Qwen2), and with ``add_bos=False`` it still returns the BOS that the tokenizer's
post-processor adds.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from torchtune_longshort.models.added_tokens import (
    AddedToken, Normalized, SpecialSplitter, read_added_tokens, sentencepiece_prefix_scheme, without_dummy_prefix,
)
from torchtune_longshort.models.chat_messages import chat_template_of, stop_ids, tokenize_messages
from torchtune_longshort.models.transformers_pipeline import as_transformers_builds_it

HF_CONFIG = "tokenizer_config.json"


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


class SourceTokenizer:
    """One tokenizer interface over every format (see the module docstring).

    Attributes: ``format``, ``path`` (the file it was read from), ``bos_id`` (None when the model has no BOS, e.g.
    Qwen2), ``eos_id``, ``pad_id`` (a valid id for right padding: the model's pad token, else EOS), ``vocab_size``
    (highest id + 1), ``adds_bos`` / ``adds_eos`` (what the source tokenizer adds to a text by default),
    ``parse_special_tokens`` (special-token strings in text get their ids as ``AutoTokenizer`` gives them; see the
    module docstring).
    """

    format = ""

    def __init__(self, path: Path):
        self.path = Path(path)
        self.max_seq_len: Optional[int] = None  # torchtune's packed datasets read it (checkpoint_tokenizer sets it)
        self.bos_id: Optional[int] = None
        self.eos_id: int = 0
        self.pad_id: int = 0
        self.vocab_size: int = 0
        self.adds_bos = True
        self.adds_eos = False
        self.parse_special_tokens = True
        self.prompt_template: Optional[Callable] = None  # torchtune's prompt_template (checkpoint_tokenizer sets it)
        self._splitter: Optional[SpecialSplitter] = None  # SentencePiece / tiktoken: the folder's added tokens

    # -------------------------------------------------------------- format-specific
    def encode_plain(self, text: str, parse_special_tokens: Optional[bool] = None) -> List[int]:
        """Token ids of ``text`` with no special tokens added (special-token strings in it: ``parse_special_tokens``,
        the tokenizer's own setting when None)."""
        parse = self.parse_special_tokens if parse_special_tokens is None else parse_special_tokens
        if not parse or self._splitter is None:
            return self._encode_text(text)
        ids: List[int] = []
        for piece, start in self._splitter.split(text):
            if isinstance(piece, int):
                ids.append(piece)
            else:
                ids.extend(self._encode_normalized(piece) if isinstance(piece, Normalized)
                           else self._encode_piece(piece, start))
        return ids

    def _encode_text(self, text: str) -> List[int]:
        """The format's own encoder: special-token strings are text."""
        raise NotImplementedError

    def _encode_piece(self, piece: str, start: int) -> List[int]:
        """Ids of the text ``piece`` that starts at ``start`` of a text cut at its special tokens, as
        ``AutoTokenizer`` encodes it."""
        return self._encode_text(piece)

    def _encode_normalized(self, fragment: str) -> List[int]:
        """Ids of a fragment the pipeline's normalizer has run on (around a ``normalized`` added token), as the
        model encodes it with no normalization (formats whose splitter is given a normalizer)."""
        raise NotImplementedError

    def _decode(self, ids: List[int]) -> str:
        raise NotImplementedError

    def special_ids(self) -> set:
        return {i for i in (self.bos_id, self.eos_id, self.pad_id) if i is not None}

    # -------------------------------------------------------------- torchtune BaseTokenizer
    def encode(self, text: str, add_bos: bool = True, add_eos: bool = True) -> List[int]:
        """``[BOS if add_bos and the source model adds one] + ids(text) + [EOS if add_eos]``."""
        ids = self.encode_plain(text)
        if add_bos and self.adds_bos and self.bos_id is not None:
            ids = [self.bos_id] + ids
        if add_eos:
            ids = ids + [self.eos_id]
        return ids

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """Text of ``token_ids``; BOS/EOS/pad dropped unless ``skip_special_tokens=False``."""
        ids = [int(t) for t in token_ids]
        if skip_special_tokens:
            special = self.special_ids()
            ids = [t for t in ids if t not in special]
        return self._decode(ids)

    def token_text(self, token_id: int) -> str:
        """The text of one (special) token as transformers' ``decode`` shows it, e.g. ``"<s>"`` for BOS."""
        return self._decode([int(token_id)])

    # -------------------------------------------------------------- torchtune ModelTokenizer (messages)
    @property
    def stop_tokens(self) -> List[int]:
        """Ids that end a generation: EOS and ``generation_config.json``'s ``eos_token_id`` (torchtune's
        ``generate`` reads this)."""
        return stop_ids(self.path.parent, self.eos_id, self.special_stop_ids())

    def special_stop_ids(self) -> List[int]:
        return []

    @functools.cached_property
    def chat_template(self) -> Optional[str]:
        """The folder's chat template (:func:`~torchtune_longshort.models.chat_messages.chat_template_of`), read
        once: a chat dataset tokenizes every row with it."""
        return chat_template_of(self.path.parent)

    def encode_continuation(self, text: str) -> List[int]:
        """Ids of ``text`` continuing a turn (torchtune's ``trim_leading_whitespace``): no word-start marker added
        in front (SentencePiece's dummy prefix); the plain ids for a format that adds none."""
        return self.encode_plain(text)

    def tokenize_messages(self, messages: Sequence[Any], add_end_tokens: bool = True) -> Tuple[List[int], List[bool]]:
        """``(tokens, mask)`` of torchtune ``Message`` s in the checkpoint's chat format
        (:mod:`~torchtune_longshort.models.chat_messages`)."""
        return tokenize_messages(self, messages, add_end_tokens, self.prompt_template)

    def __call__(self, sample: Mapping[str, Any], inference: bool = False) -> Mapping[str, Any]:
        """torchtune's model transform: ``sample["messages"]`` replaced by its ``tokens`` and ``mask`` (no end tokens
        when ``inference``), as torchtune's model tokenizers do."""
        sample = dict(sample)
        sample["tokens"], sample["mask"] = self.tokenize_messages(sample.pop("messages"), add_end_tokens=not inference)
        return sample

    # ------------------------------------------------ transformers' names, which lm-eval's results record
    # (``lm_eval.loggers.utils.add_tokenizer_info``: ``tokenizer_{pad,eos,bos}_token`` as ``[text, str(id)]``)
    @property
    def pad_token_id(self) -> int:
        return self.pad_id

    @property
    def pad_token(self) -> str:
        return self.token_text(self.pad_id)

    @property
    def eos_token_id(self) -> int:
        return self.eos_id

    @property
    def eos_token(self) -> str:
        return self.token_text(self.eos_id)

    @property
    def bos_token_id(self) -> Optional[int]:
        return self.bos_id

    @property
    def bos_token(self) -> Optional[str]:
        return None if self.bos_id is None else self.token_text(self.bos_id)

    def describe(self) -> str:
        return (f"{self.format} tokenizer {str(self.path)!r}: {self.vocab_size} ids, bos={self.bos_id}, "
                f"eos={self.eos_id}, adds BOS by default: {self.adds_bos}")

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.describe()}>"


class SentencePieceTokenizer(SourceTokenizer):
    """A SentencePiece ``tokenizer.model`` (Llama-2, Mistral, Gemma, Phi-3): torchtune's
    ``SentencePieceBaseTokenizer``; ``add_bos_token`` / ``add_eos_token`` of ``tokenizer_config.json`` (default
    true / false, transformers' ``LlamaTokenizer`` defaults) say what the source adds. Special-token strings: the
    added tokens of ``tokenizer.json`` beside it (else the model's control and unknown pieces), each piece between
    them started as the folder's ``AutoTokenizer`` starts it (:func:`~torchtune_longshort.models.added_tokens.
    sentencepiece_prefix_scheme`)."""

    format = "sentencepiece"

    def __init__(self, path: Path):
        super().__init__(path)
        from torchtune.modules.transforms.tokenizers import SentencePieceBaseTokenizer

        self._tt = SentencePieceBaseTokenizer(str(path))
        sp = self._tt.spm_model
        self.bos_id = sp.bos_id() if sp.bos_id() >= 0 else None
        self.eos_id = sp.eos_id()
        self.pad_id = sp.pad_id() if sp.pad_id() >= 0 else self.eos_id
        self.vocab_size = sp.vocab_size()
        cfg = read_json(self.path.parent / HF_CONFIG)
        # add_bos_token defaults to true; a model trained without BOS (bos_id -1) prepends nothing whatever it says
        self.adds_bos = bool(cfg.get("add_bos_token", True)) and self.bos_id is not None
        self.adds_eos = bool(cfg.get("add_eos_token", False))
        added = read_added_tokens(self.path.parent) or [
            AddedToken(sp.id_to_piece(i), i) for i in range(self.vocab_size) if sp.is_control(i) or sp.is_unknown(i)]
        self._added_special = {t.id for t in added if t.special}
        self._scheme = sentencepiece_prefix_scheme(self.path.parent)
        self._splitter = SpecialSplitter(added, pipeline_normalizer(self.path.parent, self._scheme, added))
        self._bare: Any = None  # the model without its dummy prefix, built on first use

    def special_ids(self) -> set:
        """BOS/EOS/pad and the added tokens marked special (``<unk>`` too: what ``AutoTokenizer`` skips)."""
        return set(super().special_ids()) | self._added_special

    def _encode_text(self, text: str) -> List[int]:
        return self._tt.encode(text, add_bos=False, add_eos=False)

    def _encode_piece(self, piece: str, start: int) -> List[int]:
        if self._scheme == "sentencepiece":
            return self._encode_text(piece)
        prefix = self._scheme == "always" or (self._scheme == "first" and start == 0)
        if prefix and not piece.startswith((" ", "\u2581")):  # Metaspace: a piece led by a space gets no second one
            piece = " " + piece
        return self._encode_normalized(piece)

    def _encode_normalized(self, fragment: str) -> List[int]:
        if self._bare is None:  # the model without its dummy prefix: a normalized fragment carries its own "▁"
            import sentencepiece as spm

            proto = without_dummy_prefix(self._tt.spm_model.serialized_model_proto())
            self._bare = spm.SentencePieceProcessor(model_proto=proto)
        return self._bare.encode(fragment)

    def encode_continuation(self, text: str) -> List[int]:
        # torchtune's SentencePieceBaseTokenizer(trim_leading_whitespace=True): encode after a newline, drop its ids
        head = self.encode_plain("\n")
        return self.encode_plain("\n" + text)[len(head):]

    def _decode(self, ids: List[int]) -> str:
        return self._tt.spm_model.decode(ids)

    def token_text(self, token_id: int) -> str:
        return self._tt.spm_model.id_to_piece(int(token_id))  # SentencePiece decodes control tokens to ""


class TiktokenTokenizer(SourceTokenizer):
    """Llama-3's tiktoken ``original/tokenizer.model``: torchtune's ``llama3_tokenizer``, its special tokens read
    from ``tokenizer.json`` beside it when present (canonical Llama-3 ids otherwise). Llama-3 adds
    ``<|begin_of_text|>``. Special-token strings: ``tokenizer.json``'s added tokens (else those special tokens), the
    text between them encoded piece by piece, as ``tokenizers`` does."""

    format = "tiktoken"

    def __init__(self, path: Path, special_tokens_json: Optional[Path] = None):
        super().__init__(path)
        from torchtune.models.llama3 import llama3_tokenizer

        sp = str(special_tokens_json) if special_tokens_json is not None and special_tokens_json.is_file() else None
        self._tt = llama3_tokenizer(str(path), special_tokens_path=sp)
        self.bos_id, self.eos_id = self._tt.bos_id, self._tt.eos_id
        self.pad_id = self._tt.pad_id
        self.vocab_size = max(self._tt.tt_model.vocab_size, max(self._tt.special_tokens.values()) + 1)
        self.adds_bos, self.adds_eos = True, False
        folder = special_tokens_json.parent if special_tokens_json is not None else self.path.parent
        self._splitter = SpecialSplitter(read_added_tokens(folder) or [
            AddedToken(text, i) for text, i in self._tt.special_tokens.items()])

    def special_ids(self) -> set:
        return set(self._tt.special_tokens.values())

    def special_stop_ids(self) -> List[int]:
        return list(self._tt.stop_tokens)  # Llama-3's <|eot_id|> / <|eom_id|>

    def _encode_text(self, text: str) -> List[int]:
        return self._tt.encode(text, add_bos=False, add_eos=False)

    def _decode(self, ids: List[int]) -> str:
        return self._tt.tt_model.tt_model.decode(ids)


NAMED_TOKENS = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")
TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


def add_config_tokens(tok: Any, cfg: Dict[str, Any], where: Path) -> None:
    """``tokenizer_config.json``'s ``added_tokens_decoder`` (in ``cfg``) put into the ``tokenizers`` object ``tok`` as
    transformers' ``PreTrainedTokenizerFast`` does on loading: every entry added again, in id order, with its own
    flags (``tokenizers.AddedToken``'s defaults where it has none; special where it names a BOS/EOS/... token), so
    that its flags replace ``tokenizer.json``'s for the same token and a token only the config names is appended.
    :class:`TokenizerError` naming ``where`` for a key that is not a token id."""
    from tokenizers import AddedToken as LibAddedToken

    decoder = cfg.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        return
    named = {_token_of(cfg.get(k)) for k in NAMED_TOKENS} - {None}
    entries = []
    for key, entry in decoder.items():
        try:
            tid = int(key)
        except (TypeError, ValueError):
            raise TokenizerError(f"{where}: added_tokens_decoder key {key!r} is not a token id") from None
        if isinstance(entry, dict) and isinstance(entry.get("content"), str) and entry["content"]:
            flags = {k: bool(entry[k]) for k in TOKEN_FLAGS if k in entry}
            if entry["content"] in named:
                flags["special"] = True
            entries.append((tid, LibAddedToken(entry["content"], **flags)))
    if entries:
        tok.add_tokens([t for _, t in sorted(entries, key=lambda e: e[0])])


def pipeline_normalizer(folder: Path, scheme: str, added: Sequence[AddedToken]):
    """``tokenizer.json``'s normalizer (``str -> str``, run by ``tokenizers``) where ``AutoTokenizer`` runs the file's
    pipeline (the ``sentencepiece`` and ``never`` schemes) and an added token is ``normalized``; else None
    (transformers' ``LlamaTokenizer`` pipeline has no normalizer)."""
    spec = folder / "tokenizer.json"
    if scheme not in ("sentencepiece", "never") or not any(t.normalized for t in added) or not spec.is_file():
        return None
    from tokenizers import Tokenizer

    normalizer = Tokenizer.from_file(str(spec)).normalizer
    return normalizer.normalize_str if normalizer is not None else None


def _token_of(value: Any) -> Optional[str]:
    if isinstance(value, dict):
        return value.get("content")
    return value if isinstance(value, str) else None


class HFJsonTokenizer(SourceTokenizer):
    """A Hugging Face ``tokenizer.json`` (Llama-3, Qwen2, SmolLM2, ...) through the ``tokenizers`` library.

    BOS/EOS: ``bos_token`` / ``eos_token`` of ``tokenizer_config.json`` (``special_tokens_map.json``), else the
    ids in ``generation_config.json`` / ``config.json``. What the source adds by default is read off its
    post-processor (``encode("a")`` with and without special tokens). Added tokens: the file's, with
    ``tokenizer_config.json``'s ``added_tokens_decoder`` over them (:func:`add_config_tokens`)."""

    format = "hf_json"

    def __init__(self, path: Path):
        super().__init__(path)
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:
            raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json ({type(e).__name__}: {e})") from None
        folder = self.path.parent
        self._tok = as_transformers_builds_it(self._tok, path, read_json(path.parent / "config.json"))
        config = read_json(folder / HF_CONFIG)
        cfg = {**read_json(folder / "special_tokens_map.json"), **config}
        ids = {**read_json(folder / "config.json"), **read_json(folder / "generation_config.json")}
        add_config_tokens(self._tok, cfg, folder / HF_CONFIG)

        def token_id(name: str) -> Optional[int]:
            text = _token_of(cfg.get(f"{name}_token"))
            if text is not None:
                tid = self._tok.token_to_id(text)
                if tid is None:
                    named_in = HF_CONFIG if f"{name}_token" in config else "special_tokens_map.json"
                    raise TokenizerError(f"{folder / named_in}: {name}_token {text!r} is not in {path}; set it to a "
                                         f"token of that file{' (or null: no BOS)' if name == 'bos' else ''}")
                return tid
            if f"{name}_token" in cfg and cfg[f"{name}_token"] is None:
                return None  # declared absent (Qwen2's bos_token: null)
            value = ids.get(f"{name}_token_id")
            return int(value[0] if isinstance(value, list) else value) if value is not None else None

        self.bos_id = token_id("bos")
        eos = token_id("eos")
        if eos is None:
            raise TokenizerError(f"{folder}: no eos_token in {HF_CONFIG} and no eos_token_id in config.json / "
                                 "generation_config.json: the packed training stream and generation need EOS; add "
                                 f"the model's end-of-text token to {HF_CONFIG} (\"eos_token\": \"<its text>\") "
                                 "or its id to config.json (\"eos_token_id\": N)")
        self.eos_id = eos
        pad = token_id("pad")
        self.pad_id = pad if pad is not None else self.eos_id
        self.vocab_size = max(self._tok.get_vocab(with_added_tokens=True).values()) + 1
        plain = self._tok.encode("a", add_special_tokens=False).ids
        full = self._tok.encode("a").ids
        self.adds_bos = len(full) > len(plain) and full[0] != plain[0]
        self.adds_eos = len(full) > len(plain) and full[-1] != plain[-1]
        if self.adds_bos and self.bos_id is None:
            self.bos_id = full[0]

    def special_ids(self) -> set:
        """BOS/EOS/pad and every added token marked special (what ``decode(skip_special_tokens=True)`` drops)."""
        added = {i for i, t in self._tok.get_added_tokens_decoder().items() if t.special}
        return set(super().special_ids()) | added

    def encode_plain(self, text: str, parse_special_tokens: Optional[bool] = None) -> List[int]:
        parse = self.parse_special_tokens if parse_special_tokens is None else parse_special_tokens
        self._tok.encode_special_tokens = not parse  # tokenizers cuts added tokens by default
        return self._tok.encode(text, add_special_tokens=False).ids

    def _decode(self, ids: List[int]) -> str:
        return self._tok.decode(ids, skip_special_tokens=False)

    def token_text(self, token_id: int) -> str:
        return self._tok.id_to_token(int(token_id)) or self._decode([int(token_id)])

