"""The tokenizer a GGUF file describes, as llama.cpp (the file's own runtime) encodes with it.

transformers builds the tokenizer of a GGUF (``AutoTokenizer.from_pretrained(folder, gguf_file=...)``) from its
``tokenizer.ggml.*`` fields; for a SentencePiece vocabulary (``tokenizer.ggml.model = "llama"``: Llama-2, Mistral,
TinyLlama, Code Llama ...) outside the architectures it special-cases (Phi-3, Gemma) it gives the Metaspace
pre-tokenizer with ``prepend_scheme: first``, which prepends no ``▁`` to a text that starts with a space:
``" Hello"`` was ``[15043]`` where llama.cpp and sentencepiece give ``[29871, 15043]`` (15 of the 47 texts of
llama.cpp's own ``ggml-vocab-llama-spm`` test). :func:`as_llama_cpp_encodes` puts SentencePiece's own pipeline in
its place, the one hub Llama-2's ``tokenizer.json`` has (and
:func:`~torchtune_longshort.models.hf_tokenizer.write_hf_tokenizer_files` writes): a normalizer that prepends ``▁``
(when ``tokenizer.ggml.add_space_prefix`` is not false, llama.cpp's default) and turns every space into ``▁``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Dict

SPACE = "\u2581"
# architectures transformers gives their own SentencePiece pipeline (its GGUF_SENTENCEPIECE_BUILDERS)
_OWN_PIPELINE = ("phi3", "gemma", "gemma2", "gemma3", "gemma4")


def tokenizer_fields(gguf: Path) -> Dict[str, Any]:
    """``general.architecture`` and the scalar ``tokenizer.ggml.*`` fields of ``gguf`` that say how it encodes."""
    from gguf import GGUFReader  # deferred: gguf (an optional extra; the caller checked it)

    fields = GGUFReader(str(gguf)).fields
    out = {}
    for key in ("general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.add_space_prefix"):
        if key in fields:
            out[key] = fields[key].contents()
    return out


def as_llama_cpp_encodes(tok: Any, gguf: Path) -> bool:
    """Give ``tok`` (transformers' tokenizer of ``gguf``) SentencePiece's pipeline where transformers built the
    Metaspace one for a SentencePiece vocabulary; True when it changed anything."""
    from tokenizers import decoders, normalizers, pre_tokenizers

    meta = tokenizer_fields(gguf)
    if meta.get("tokenizer.ggml.model") != "llama" or meta.get("general.architecture") in _OWN_PIPELINE:
        return False
    backend = tok.backend_tokenizer
    if not isinstance(backend.pre_tokenizer, pre_tokenizers.Metaspace):
        return False
    prefix = meta.get("tokenizer.ggml.add_space_prefix", True) is not False
    steps = [normalizers.Prepend(prepend=SPACE)] if prefix else []
    backend.normalizer = normalizers.Sequence([*steps, normalizers.Replace(" ", SPACE)])
    backend.pre_tokenizer = None
    if not prefix:  # no dummy prefix to take off a decoded text (its Strip would eat a real leading space)
        backend.decoder = decoders.Sequence([decoders.Replace(SPACE, " "), decoders.ByteFallback(), decoders.Fuse()])
    return True
