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

For a byte-level BPE vocabulary (``tokenizer.ggml.model = "gpt2"``), llama.cpp splits the text before its merges by
the regexes of the file's pre-type (``tokenizer.ggml.pre``); transformers reads the pre-type for a few (Llama-3's,
Qwen2's ...) and gives every other the GPT-2 split alone (``ByteLevel``). SmolLM2's ``"smollm"`` splits every digit
first (llama.cpp's ``\p{N}`` before GPT-2's regex, the hub tokenizer.json's ``Digits(individual_digits=True)``):
``"\n        0"`` and ``"2024"`` encoded otherwise than the model was trained with. :data:`PRE_TOKENIZERS` gives each
pre-type it knows its split; another that transformers left to GPT-2's gets one ``note:`` line.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any, Callable, Dict

SPACE = "\u2581"
# architectures transformers gives their own SentencePiece pipeline (its GGUF_SENTENCEPIECE_BUILDERS)
_OWN_PIPELINE = ("phi3", "gemma", "gemma2", "gemma3", "gemma4")

# llama.cpp's pre-types of a byte-level BPE vocabulary (tokenizer.ggml.pre, as llama-vocab.cpp names them) -> the
# Hugging Face pre_tokenizer its regexes amount to. "digits": regex_exprs {\p{N}, GPT-2's} (llama.cpp groups
# STARCODER, REFACT, COMMAND_R, SMOLLM, CODESHELL, EXAONE, MINERVA under one case), the hub SmolLM2 / StarCoder
# tokenizer.json's Sequence[Digits(individual_digits), ByteLevel]; "gpt2": GPT-2's regex alone (GPT2, MPT, OLMO,
# JAIS), ByteLevel's own, which transformers gives already.
def _digits_then_gpt2() -> Any:
    from tokenizers import pre_tokenizers

    return pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), _gpt2()])


def _gpt2() -> Any:
    from tokenizers import pre_tokenizers

    return pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=True, use_regex=True)


PRE_TOKENIZERS: Dict[str, Callable[[], Any]] = {
    **dict.fromkeys(("smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"),
                    _digits_then_gpt2),
    **dict.fromkeys(("gpt-2", "phi-2", "mpt", "olmo", "jais"), _gpt2),
}


def tokenizer_fields(gguf: Path, reader: Any = None) -> Dict[str, Any]:
    """``general.architecture`` and the scalar ``tokenizer.ggml.*`` fields of ``gguf`` that say how it encodes
    (from ``reader``, the file's ``GGUFReader`` where the caller has one)."""
    if reader is None:
        from gguf import GGUFReader  # deferred: gguf (an optional extra; the caller checked it)

        reader = GGUFReader(str(gguf))
    fields = reader.fields
    out = {}
    for key in ("general.architecture", "tokenizer.ggml.model", "tokenizer.ggml.pre",
                "tokenizer.ggml.add_space_prefix"):
        if key in fields:
            out[key] = fields[key].contents()
    return out


def as_llama_cpp_encodes(tok: Any, gguf: Path, reader: Any = None) -> bool:
    """Give ``tok`` (transformers' tokenizer of ``gguf``) SentencePiece's pipeline where transformers built the
    Metaspace one for a SentencePiece vocabulary, and the split of the file's pre-type (:data:`PRE_TOKENIZERS`)
    where transformers gave a byte-level one GPT-2's; True when it changed anything."""
    from tokenizers import decoders, normalizers, pre_tokenizers

    meta = tokenizer_fields(gguf, reader)
    if meta.get("tokenizer.ggml.model") == "gpt2":
        return _byte_level_split(tok, gguf, meta.get("tokenizer.ggml.pre") or "default")
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


def _byte_level_split(tok: Any, gguf: Path, pre: str) -> bool:
    """The split of pre-type ``pre`` for ``tok``'s byte-level vocabulary where transformers gave GPT-2's alone (a
    split of its own, for a pre-type it reads: kept); a pre-type :data:`PRE_TOKENIZERS` lacks: one note line."""
    from tokenizers import pre_tokenizers

    backend = tok.backend_tokenizer
    if not isinstance(backend.pre_tokenizer, pre_tokenizers.ByteLevel):
        return False
    if pre not in PRE_TOKENIZERS:
        print(f"note: --gguf {str(gguf)!r} splits text as llama.cpp's pre-tokenizer {pre!r} (tokenizer.ggml.pre), "
              "which neither transformers nor this converter knows: its tokenizer.json splits as GPT-2 does, and may "
              "encode some texts (digits, whitespace) otherwise than llama.cpp", file=sys.stderr, flush=True)
        return False
    if PRE_TOKENIZERS[pre] is _gpt2:
        return False
    backend.pre_tokenizer = PRE_TOKENIZERS[pre]()
    return True
