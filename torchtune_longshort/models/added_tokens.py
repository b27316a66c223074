"""Special-token strings in text, as transformers' ``AutoTokenizer`` (what lm-eval's ``hf`` runs) reads them, for the
formats whose own encoders do not: SentencePiece and tiktoken
(:mod:`~torchtune_longshort.models.source_tokenizers`).

``AutoTokenizer`` first cuts a text at every *added token* of the folder (``tokenizer.json``'s ``added_tokens``:
``<s>``, ``</s>``, ``<unk>``, ``<|begin_of_text|>``, ``<|eot_id|>``, ...; leftmost, longest first; ``lstrip`` /
``rstrip`` tokens take the whitespace beside them), gives each its id, and encodes the text between them piece by
piece. :class:`SpecialSplitter` makes the same cut. A ``normalized`` token is looked for, as ``tokenizers`` does, in
each piece between the others once the pipeline's normalizer has run on it (its content normalized too), where its
flags see the normalized text; the fragments around it are then normalized text (:class:`Normalized`).

How a SentencePiece piece between two tokens starts (the dummy prefix ``▁``) depends on the pipeline transformers
builds for the folder, :func:`sentencepiece_prefix_scheme`:

``sentencepiece``  every piece is encoded as SentencePiece encodes a text (its dummy prefix included): a
                   ``tokenizer.json`` whose normalizer prepends ``▁`` (hub Llama-2's, the one this project writes).
``always``         transformers' ``LlamaTokenizer`` with ``legacy: true``: a Metaspace pre-tokenizer that prepends
                   ``▁`` to every piece not starting with a space.
``first``          ``LlamaTokenizer`` with ``legacy: false`` (transformers 5's default): only the piece at the very
                   start of the text gets ``▁``, and only when it does not start with a space.
``never``          no ``▁`` is prepended (``add_prefix_space: false``; Gemma's pipeline).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple, Union

SCHEMES = ("sentencepiece", "always", "first", "never")
_METASPACE_CLASSES = ("LlamaTokenizer", "CodeLlamaTokenizer")


@dataclass(frozen=True)
class AddedToken:
    """One added token of a folder, with the matching flags of ``tokenizers.AddedToken``."""

    content: str
    id: int
    special: bool = True
    lstrip: bool = False
    rstrip: bool = False
    single_word: bool = False
    normalized: bool = False


class Normalized(str):
    """A fragment of a text that the pipeline's normalizer has already run on (around a ``normalized`` token)."""


def _json(path: Path) -> Dict[str, Any]:
    try:
        return json.loads(path.read_text()) if path.is_file() else {}
    except (json.JSONDecodeError, UnicodeDecodeError):
        return {}


def _token(content: Any, tid: Any, flags: Dict[str, Any]) -> Optional[AddedToken]:
    if not isinstance(content, str) or not content or tid is None:
        return None
    special = bool(flags.get("special", True))
    return AddedToken(content, int(tid), special, bool(flags.get("lstrip", False)), bool(flags.get("rstrip", False)),
                      bool(flags.get("single_word", False)), bool(flags.get("normalized", not special)))


def read_added_tokens(folder: Path) -> List[AddedToken]:
    """The added tokens ``AutoTokenizer`` splits a text on: ``tokenizer.json``'s ``added_tokens``, then
    ``tokenizer_config.json``'s ``added_tokens_decoder``, which transformers adds again on loading: its flags replace
    the file's for a token both name (the id stays the file's), and a token only it names is added; [] when the
    folder has neither."""
    found: Dict[str, AddedToken] = {}
    for entry in _json(folder / "tokenizer.json").get("added_tokens") or []:
        tok = _token(entry.get("content"), entry.get("id"), entry)
        if tok is not None:
            found.setdefault(tok.content, tok)
    for tid, entry in (_json(folder / "tokenizer_config.json").get("added_tokens_decoder") or {}).items():
        tok = _token(entry.get("content"), tid, entry) if isinstance(entry, dict) else None
        if tok is not None:
            known = found.get(tok.content)
            found[tok.content] = tok if known is None else replace(tok, id=known.id)
    return list(found.values())


def _is_word(ch: str) -> bool:
    return ch.isalnum() or ch == "_"


def _pattern(contents: Iterable[str]) -> Optional["re.Pattern[str]"]:
    names = sorted(contents, key=len, reverse=True)  # longest first: Python's alternation is then leftmost-longest
    return re.compile("|".join(map(re.escape, names))) if names else None


class SpecialSplitter:
    """Cuts a text at the given added tokens, as ``tokenizers``' added vocabulary does: the tokens that are not
    ``normalized`` first, in the text; then the ``normalized`` ones in each piece between those, once ``normalize``
    (the pipeline's normalizer, ``str -> str``; None: a pipeline without one) has run on the piece and the content."""

    def __init__(self, tokens: Iterable[AddedToken], normalize: Optional[Callable[[str], str]] = None):
        tokens = list(tokens)
        self.tokens: Dict[str, AddedToken] = {t.content: t for t in tokens if not t.normalized}
        self.normalized: Dict[str, AddedToken] = {(normalize or str)(t.content): t for t in tokens if t.normalized}
        self._normalize = normalize
        self._re, self._re_normalized = _pattern(self.tokens), _pattern(self.normalized)

    def split(self, text: str) -> List[Tuple[Union[str, int], int]]:
        """``[(piece, start)]`` in order: a piece is a text between tokens (``str``; :class:`Normalized` where a
        ``normalized`` token was cut out of a piece the normalizer ran on) or a token's id (``int``); ``start``: where
        it begins in ``text`` (a normalized fragment: where its piece begins)."""
        out: List[Tuple[Union[str, int], int]] = []
        for piece, start in _cut(text, self.tokens, self._re):
            if isinstance(piece, str) and self._re_normalized is not None:
                norm = self._normalize(piece) if self._normalize is not None else piece
                cut = _cut(norm, self.normalized, self._re_normalized)
                if any(isinstance(p, int) for p, _ in cut):
                    if self._normalize is None:
                        out.extend((p, start + at) for p, at in cut)
                    else:
                        out.extend((p if isinstance(p, int) else Normalized(p), start) for p, _ in cut)
                    continue
            out.append((piece, start))
        return out


def _cut(text: str, tokens: Dict[str, AddedToken], pattern) -> List[Tuple[Union[str, int], int]]:
    """``text`` cut at the ``tokens`` that ``pattern`` finds, with their flags (see :meth:`SpecialSplitter.split`)."""
    if pattern is None:
        return [(text, 0)] if text else []
    out: List[Tuple[Union[str, int], int]] = []
    pos = 0
    for m in pattern.finditer(text):
        tok = tokens[m.group()]
        start, end = m.start(), m.end()
        if start < pos:
            continue  # inside the whitespace an rstrip token took
        if tok.single_word and ((start > 0 and _is_word(text[start - 1]))
                                or (end < len(text) and _is_word(text[end]))):
            continue
        if tok.lstrip:
            while start > pos and text[start - 1].isspace():
                start -= 1
        if tok.rstrip:
            while end < len(text) and text[end].isspace():
                end += 1
        if start > pos:
            out.append((text[pos:start], pos))
        out.append((tok.id, start))
        pos = end
    if pos < len(text):
        out.append((text[pos:], pos))
    return out


def _metaspace_scheme(pre: Dict[str, Any]) -> Optional[str]:
    if pre.get("type") == "Metaspace":
        if "prepend_scheme" in pre:
            return str(pre["prepend_scheme"])
        return "always" if pre.get("add_prefix_space", True) else "never"
    for sub in pre.get("pretokenizers") or []:
        found = _metaspace_scheme(sub) if isinstance(sub, dict) else None
        if found is not None:
            return found
    return None


def _prepends(normalizer: Dict[str, Any]) -> bool:
    if normalizer.get("type") == "Prepend":
        return True
    return any(isinstance(n, dict) and _prepends(n) for n in normalizer.get("normalizers") or [])


def sentencepiece_prefix_scheme(folder: Path) -> str:
    """How ``AutoTokenizer`` on ``folder`` starts each SentencePiece piece (one of :data:`SCHEMES`, module
    docstring): transformers' ``LlamaTokenizer`` (``tokenizer_class`` in ``tokenizer_config.json``) builds its own
    Metaspace pipeline from ``legacy`` / ``add_prefix_space``; any other class runs ``tokenizer.json`` as written;
    a folder without ``tokenizer.json`` is read as SentencePiece reads it."""
    cfg = _json(folder / "tokenizer_config.json")
    cls = str(cfg.get("tokenizer_class") or "")
    cls = cls[:-4] if cls.endswith("Fast") else cls
    if cls in _METASPACE_CLASSES:
        if cfg.get("add_prefix_space") is False:
            return "never"
        return "always" if cfg.get("legacy") is True else "first"
    spec = _json(folder / "tokenizer.json")
    if not spec or _prepends(spec.get("normalizer") or {}):
        return "sentencepiece"
    return _metaspace_scheme(spec.get("pre_tokenizer") or {}) or "never"


def strips_leading_space(folder: Path) -> Optional[bool]:
    """Whether ``AutoTokenizer`` on ``folder`` drops one space at the start of a decoded text, whatever piece gave it
    (a word piece's ``▁`` or a byte piece ``<0x20>``): transformers' ``LlamaTokenizer`` adds ``Strip(" ", left=1)``
    to its decoder unless ``add_prefix_space`` is false; any other class runs ``tokenizer.json``'s decoder, which
    strips the text's start where a ``Strip`` of ``" "`` follows a ``Fuse`` (hub Llama-2's, this project's). None
    where neither gives the pipeline (no ``tokenizer.json``): the folder is read as SentencePiece reads it, whose
    decode drops a leading ``▁`` where the model adds a dummy prefix and keeps ``<0x20>``."""
    cfg = _json(folder / "tokenizer_config.json")
    cls = str(cfg.get("tokenizer_class") or "")
    if (cls[:-4] if cls.endswith("Fast") else cls) in _METASPACE_CLASSES:
        return cfg.get("add_prefix_space") is not False
    spec = _json(folder / "tokenizer.json")
    if not spec:
        return None
    decoder = spec.get("decoder") or {}
    steps = decoder.get("decoders") or [] if decoder.get("type") == "Sequence" else [decoder]
    fused = False
    for step in steps if isinstance(steps, list) else []:
        kind = step.get("type") if isinstance(step, dict) else None
        fused = fused or kind == "Fuse"
        if kind == "Strip" and fused and step.get("content") == " " and int(step.get("start") or 0) >= 1:
            return True
    return False


def without_dummy_prefix(model: bytes) -> bytes:
    """A serialized SentencePiece ``ModelProto`` with ``normalizer_spec.add_dummy_prefix`` false (field 3 of field
    3), rewritten at the wire level so that no ``protobuf`` package is needed."""
    out, i = bytearray(), 0
    while i < len(model):
        start = i
        key, i = _varint(model, i)
        field, wire = key >> 3, key & 7
        if wire == 2:
            size, i = _varint(model, i)
            body, i = model[i:i + size], i + size
            if field == 3:
                body = _drop_field(body, 3) + bytes([0x18, 0x00])  # add_dummy_prefix: false
                out += _encode_varint(key) + _encode_varint(len(body)) + body
                continue
        else:
            i = _skip(model, i, wire)
        out += model[start:i]
    return bytes(out)


def adds_dummy_prefix(model: bytes) -> bool:
    """Whether a serialized SentencePiece ``ModelProto`` encodes a text with its dummy prefix ``▁``
    (``normalizer_spec.add_dummy_prefix``, field 3 of field 3; true when absent), read at the wire level: the last
    value written wins, as protobuf (and so SentencePiece) reads a field found more than once."""
    found = True
    for field, value in _fields(model):
        if field == 3 and isinstance(value, bytes):
            for f, v in _fields(value):
                found = bool(v) if f == 3 and isinstance(v, int) else found
    return found


def _fields(buf: bytes):
    """``(field, value)`` of a protobuf message: a varint's int, a length-delimited field's bytes, else None."""
    i = 0
    while i < len(buf):
        key, i = _varint(buf, i)
        if key & 7 == 0:
            value, i = _varint(buf, i)
        elif key & 7 == 2:
            size, i = _varint(buf, i)
            value, i = buf[i:i + size], i + size
        else:
            value, i = None, _skip(buf, i, key & 7)
        yield key >> 3, value


def _varint(buf: bytes, i: int) -> Tuple[int, int]:
    value, shift = 0, 0
    while True:
        b = buf[i]
        value |= (b & 0x7F) << shift
        i, shift = i + 1, shift + 7
        if not b & 0x80:
            return value, i


def _encode_varint(value: int) -> bytes:
    out = bytearray()
    while True:
        b, value = value & 0x7F, value >> 7
        out.append(b | (0x80 if value else 0))
        if not value:
            return bytes(out)


def _skip(buf: bytes, i: int, wire: int) -> int:
    if wire == 0:
        return _varint(buf, i)[1]
    if wire == 1:
        return i + 8
    if wire == 5:
        return i + 4
    raise ValueError(f"unsupported protobuf wire type {wire}")


def _drop_field(body: bytes, drop: int) -> bytes:
    out, i = bytearray(), 0
    while i < len(body):
        start = i
        key, i = _varint(body, i)
        if key & 7 == 2:
            size, i = _varint(body, i)
            i += size
        else:
            i = _skip(body, i, key & 7)
        if key >> 3 != drop:
            out += body[start:i]
    return bytes(out)
