"""A Hugging Face ``tokenizer.json`` as a :class:`~torchtune_longshort.models.source_tokenizers.SourceTokenizer`
(:class:`HFJsonTokenizer`, the ``hf_json`` format of :mod:`~torchtune_longshort.models.tokenizer_formats`), read
through the ``tokenizers`` library as transformers' ``PreTrainedTokenizerFast`` builds it: the pipeline of
:mod:`~torchtune_longshort.models.transformers_pipeline`, ``tokenizer_config.json``'s added tokens over the file's
(:func:`add_config_tokens`), BOS/EOS/pad named there or in ``special_tokens_map.json`` (as transformers reads the
two) / ``config.json`` / ``generation_config.json``. The interface's conventions:
:mod:`~torchtune_longshort.models.source_tokenizers`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict, List, Optional, Set

from torchtune_longshort.models.source_tokenizers import HF_CONFIG, SourceTokenizer
from torchtune_longshort.models.tokenizer_files import (
    TokenizerError, read_json, token_settings, unread_token_settings,
)
from torchtune_longshort.models.tokenizer_files import token_of as _token_of
from torchtune_longshort.models.transformers_pipeline import as_transformers_builds_it


TOKEN_FLAGS = ("single_word", "lstrip", "rstrip", "normalized", "special")


def add_config_tokens(tok: Any, cfg: Dict[str, Any], where: Path, named: Set[str]) -> None:
    """``tokenizer_config.json``'s ``added_tokens_decoder`` (in ``cfg``) put into the ``tokenizers`` object ``tok`` as
    transformers' ``PreTrainedTokenizerFast`` does on loading: every entry added again, in id order, with its own
    flags (``tokenizers.AddedToken``'s defaults where it has none; special where it is one of ``named``, the texts of
    the folder's BOS/EOS/... tokens), so that its flags replace ``tokenizer.json``'s for the same token and a token
    only the config names is appended. :class:`TokenizerError` naming ``where`` for a key that is not a token id."""
    from tokenizers import AddedToken as LibAddedToken

    decoder = cfg.get("added_tokens_decoder") or {}
    if not isinstance(decoder, dict):
        return
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


class HFJsonTokenizer(SourceTokenizer):
    """A Hugging Face ``tokenizer.json`` (Llama-3, Qwen2, SmolLM2, ...) through the ``tokenizers`` library.

    BOS/EOS: ``bos_token`` / ``eos_token`` as transformers reads them from ``tokenizer_config.json`` and
    ``special_tokens_map.json`` (:func:`~torchtune_longshort.models.tokenizer_files.token_settings`), else the ids in
    ``generation_config.json`` / ``config.json``. What the source adds by default is read off its post-processor
    (``encode("a")`` with and without special tokens). Added tokens: the file's, with
    ``tokenizer_config.json``'s ``added_tokens_decoder`` over them (:func:`add_config_tokens`)."""

    format = "hf_json"

    def __init__(self, path: Path):
        super().__init__(path)
        from tokenizers import Tokenizer

        try:
            self._tok = Tokenizer.from_file(str(path))
        except Exception as e:
            raise TokenizerError(f"{path}: not a Hugging Face tokenizer.json ({type(e).__name__}: {e}): copy it "
                                 "from the checkpoint again") from None
        folder = self.path.parent
        self._tok = as_transformers_builds_it(self._tok, path, read_json(path.parent / "config.json"))
        settings = token_settings(folder)
        ids = {**read_json(folder / "config.json"), **read_json(folder / "generation_config.json")}
        named = {text for value, _ in settings.values() if (text := _token_of(value)) is not None}
        add_config_tokens(self._tok, read_json(folder / HF_CONFIG), folder / HF_CONFIG, named)

        def token_id(name: str) -> Optional[int]:
            value, named_in = settings.get(f"{name}_token", (None, None))
            text = _token_of(value)
            if text is not None:
                tid = self._tok.token_to_id(text)
                if tid is None:
                    raise TokenizerError(f"{folder / named_in}: {name}_token {text!r} is not in {path}; set it to a "
                                         f"token of that file{' (or null: no BOS)' if name == 'bos' else ''}")
                return tid
            if named_in is not None and value is None:
                return None  # declared absent (Qwen2's bos_token: null)
            value = ids.get(f"{name}_token_id")
            return int(value[0] if isinstance(value, list) else value) if value is not None else None

        self.bos_id = token_id("bos")
        eos = token_id("eos")
        if eos is None:
            unread = ("; special_tokens_map.json's eos_token is not read where tokenizer_config.json has "
                      "added_tokens_decoder (as transformers reads the folder)"
                      if "eos_token" in unread_token_settings(folder) else "")
            raise TokenizerError(f"{folder}: no eos_token in {HF_CONFIG} and no eos_token_id in config.json / "
                                 f"generation_config.json{unread}: the packed training stream and generation need "
                                 f"EOS; add the model's end-of-text token to {HF_CONFIG} (\"eos_token\": \"<its "
                                 "text>\") or its id to config.json (\"eos_token_id\": N)")
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
