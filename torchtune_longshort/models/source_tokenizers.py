"""One tokenizer interface over every tokenizer format of a checkpoint folder (:class:`SourceTokenizer`), and its
SentencePiece and tiktoken implementations (``tokenizer.json``'s: :mod:`~torchtune_longshort.models.
hf_json_tokenizer`); which format a folder holds, and which class loads it, is
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
from pathlib import Path
from typing import Any, Callable, Dict, List, Mapping, Optional, Sequence, Tuple

from torchtune_longshort.models.added_tokens import (
    AddedToken, Normalized, SpecialSplitter, read_added_tokens, sentencepiece_prefix_scheme, strips_leading_space,
    without_dummy_prefix,
)
from torchtune_longshort.models.chat_messages import chat_template_of, chat_template_tokens, stop_ids, tokenize_messages
from torchtune_longshort.models.tokenizer_files import read_json

HF_CONFIG = "tokenizer_config.json"


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

    @functools.cached_property
    def template_tokens(self) -> Dict[str, str]:
        """The special tokens the chat template is rendered with (:func:`~torchtune_longshort.models.chat_messages.
        chat_template_tokens`: ``apply_chat_template``'s, ``unk_token``, ``pad_token``, ... besides BOS/EOS), read
        once."""
        return chat_template_tokens(self.path.parent, self.bos_token, self.eos_token)

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
        self._shown = {t.id: t.content for t in added}  # what AutoTokenizer shows for one (SentencePiece: "")
        self._scheme = sentencepiece_prefix_scheme(self.path.parent)
        self._splitter = SpecialSplitter(added, pipeline_normalizer(self.path.parent, self._scheme, added))
        self._bare: Any = None  # the model without its dummy prefix, built on first use
        self._strips = strips_leading_space(self.path.parent)  # None: SentencePiece's own decode
        self._anchor: Optional[Tuple[int, str]] = None  # a plain piece and its text, found on first use

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
        """The text ``AutoTokenizer`` (what lm-eval's ``hf`` decodes with) gives ``ids``: every ``▁`` a space, one
        space dropped at the text's start exactly where its decoder strips one
        (:func:`~torchtune_longshort.models.added_tokens.strips_leading_space`), whatever piece gave it; SentencePiece
        drops a leading ``▁`` by its model's dummy prefix instead (``add_prefix_space: false``: ``' the|ter'`` read
        ``'the|ter'``) and keeps ``<0x20>``. A run of byte pieces that is no UTF-8 gives one U+FFFD per byte, as
        ``ByteFallback`` does (SentencePiece kept the run's valid bytes: ``<0x78><0x88>``, ``x\ufffd``). A special
        token left in (``decode(..., skip_special_tokens=False)``) reads as its text, ``<s>``, ``</s>``, ``<unk>``, as
        in ``AutoTokenizer``'s (SentencePiece: nothing, ``' ⁇ '`` for ``<unk>``). A folder without such a pipeline
        (no ``tokenizer.json``) keeps or drops a leading space as SentencePiece does (byte runs, specials as above)."""
        special = self.special_ids()
        parts, start = [], 0
        for i, t in enumerate(ids + [-1]):  # a special token kept (skip_special_tokens=False) reads as its text,
            if t in special or t == -1:     # '<s> the</s>', where SentencePiece gives it none
                head = start == 0 and self._strips is None  # SentencePiece's own decode: its dummy prefix strips
                parts.append(self._decode_runs(ids[start:i], keep_start=not head) if i > start else "")
                parts.append(self._shown.get(t, self._tt.spm_model.id_to_piece(t)) if t != -1 else "")
                start = i + 1
        text = "".join(parts)
        return text[1:] if self._strips and text.startswith(" ") else text

    def _decode_runs(self, ids: List[int], keep_start: bool) -> str:
        sp = self._tt.spm_model
        parts, start, i = [], 0, 0
        while i < len(ids):
            end = i
            while end < len(ids) and sp.is_byte(ids[end]):
                end += 1
            run = bytes(int(sp.id_to_piece(t)[3:5], 16) for t in ids[i:end])
            try:
                run.decode("utf-8")
            except UnicodeDecodeError:  # the text before the run, then the run as ByteFallback renders it
                parts += [self._segment(ids[start:i], keep_start or start > 0), "\ufffd" * len(run)]
                start = end
            i = max(end, i + 1)
        return "".join(parts) + self._segment(ids[start:], keep_start or start > 0)

    def _segment(self, ids: List[int], keep_start: bool) -> str:
        """SentencePiece's text of ``ids``; with ``keep_start`` a leading ``▁`` stays a space (a plain piece decoded
        before it, and its text dropped, keeps SentencePiece from stripping it as the text's start)."""
        sp = self._tt.spm_model
        if not keep_start or not ids:
            return sp.decode(ids)
        if self._anchor is None:
            self._anchor = next((i, sp.decode([i])) for i in range(self.vocab_size) if not (
                sp.is_control(i) or sp.is_unknown(i) or sp.is_byte(i) or sp.is_unused(i))
                and sp.id_to_piece(i)[:1] not in ("", "\u2581") and sp.decode([i])[:1] not in ("", " "))
        anchor, text = self._anchor
        return sp.decode([anchor] + ids)[len(text):]

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
