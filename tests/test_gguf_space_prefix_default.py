"""A SentencePiece GGUF that does not say ``tokenizer.ggml.add_space_prefix`` (older converters, hand-made files)
encodes as llama.cpp reads it: llama-vocab.cpp sets ``add_space_prefix = true`` for an SPM vocabulary and keeps it
when the key is absent, as sentencepiece's own ``add_dummy_prefix`` default does. Reference: sentencepiece encoding
with the trained model as it is (dummy prefix on)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("gguf")

from test_gguf_files import TEXTS, _with_weights  # noqa: E402


def _gguf_without_space_prefix_key(path: Path, sp_model: bytes) -> Path:
    from gguf import GGUFWriter
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(sp_model)
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama"), w.add_tokenizer_pre("default")
    w.add_token_list([p.piece for p in m.pieces]), w.add_token_scores([p.score for p in m.pieces])
    w.add_token_types([int(p.type) for p in m.pieces])
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_unk_token_id(0), w.add_add_bos_token(True)
    _with_weights(w, len(m.pieces))
    return path


def test_a_gguf_without_the_space_prefix_key_prepends_one_as_llama_cpp_does(tmp_path, sp_tokenizer_dir):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from torchtune_longshort.models.gguf_tokenizer import as_llama_cpp_encodes, tokenizer_fields

    model = (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes()
    gguf = _gguf_without_space_prefix_key(tmp_path / "m.gguf", model)
    assert "tokenizer.ggml.add_space_prefix" not in tokenizer_fields(gguf)
    reference = spm.SentencePieceProcessor(model_proto=model)
    tok = AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=gguf.name)
    assert as_llama_cpp_encodes(tok, gguf)
    for text in TEXTS:
        assert tok(text, add_special_tokens=False)["input_ids"] == reference.encode(text), text
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == reference.decode(reference.encode(text))
