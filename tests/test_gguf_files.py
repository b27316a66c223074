"""`--gguf F --out DIR` on GGUF files of the kinds users have, written here with the gguf package (skipped without it):
the converted folder's tokenizer encodes as the file's own runtime does (llama.cpp, which encodes a SentencePiece
vocabulary as sentencepiece does); a file without the weights its header describes is refused, nothing written."""

from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("gguf")

# texts starting with spaces are where transformers' Metaspace pipeline and sentencepiece part
TEXTS = [" Hello world", "  two spaces", "   three\n    four", "Hello, world!", " (", "\tTab", "a  b   c"]


def sentencepiece_gguf(path: Path, sp_model: bytes, add_space_prefix: bool = True, drop=(), q_type=None) -> Path:
    """A tiny random Llama GGUF (hidden 16, one layer) whose vocabulary is the SentencePiece model ``sp_model`` (the
    fields llama.cpp's converter writes for one: pieces, scores, piece types); the tensors named in ``drop`` left
    out (all of them: ``drop="*"``); ``q_type``: a GGMLQuantizationType the ffn_down weight is stored in
    (zero blocks)."""
    from gguf import GGUFWriter, quants
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(sp_model)
    w, rng, dim, ffn = GGUFWriter(str(path), "llama"), np.random.default_rng(0), 16, 32
    w.add_context_length(64), w.add_embedding_length(dim), w.add_block_count(1), w.add_feed_forward_length(ffn)
    w.add_head_count(2), w.add_head_count_kv(1), w.add_layer_norm_rms_eps(1e-5), w.add_rope_dimension_count(8)
    w.add_tokenizer_model("llama"), w.add_tokenizer_pre("default")
    w.add_token_list([p.piece for p in m.pieces]), w.add_token_scores([p.score for p in m.pieces])
    w.add_token_types([int(p.type) for p in m.pieces])
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_unk_token_id(0), w.add_add_bos_token(True)
    w.add_add_space_prefix(add_space_prefix)
    shapes = {"token_embd.weight": (len(m.pieces), dim), "output_norm.weight": (dim,),
              "blk.0.attn_norm.weight": (dim,), "blk.0.ffn_norm.weight": (dim,), "blk.0.attn_q.weight": (dim, dim),
              "blk.0.attn_k.weight": (8, dim), "blk.0.attn_v.weight": (8, dim), "blk.0.attn_output.weight": (dim, dim),
              "blk.0.ffn_gate.weight": (ffn, dim), "blk.0.ffn_up.weight": (ffn, dim),
              "blk.0.ffn_down.weight": (dim, ffn)}
    for name, shape in shapes.items() if drop != "*" else ():
        if q_type is not None and name == "blk.0.ffn_down.weight":
            block, size = quants.GGML_QUANT_SIZES[q_type]
            w.add_tensor(name, np.zeros((shape[0], shape[1] * size // block), np.uint8), raw_dtype=q_type)
        elif name not in drop:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    return path


@pytest.mark.parametrize("add_space_prefix", [True, False])
def test_a_sentencepiece_gguf_converts_to_a_tokenizer_that_encodes_as_sentencepiece(tmp_path, sp_tokenizer_dir,
                                                                                     add_space_prefix):
    # transformers' Metaspace pipeline (prepend_scheme first) prepended no "▁" to a text starting with a space:
    # " Hello world" lost its space, where llama.cpp and sentencepiece keep it (llama.cpp's own ggml-vocab-llama-spm
    # test: 15 of 47 texts differed); with add_space_prefix false it prepended one llama.cpp does not
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import AutoTokenizer

    from torchtune_longshort.models.gguf import convert_gguf

    model = (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes()
    proto = pb.ModelProto()
    proto.ParseFromString(model)
    proto.normalizer_spec.add_dummy_prefix = add_space_prefix
    reference = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    gguf = sentencepiece_gguf(tmp_path / "m.gguf", model, add_space_prefix)
    out = convert_gguf(gguf, tmp_path / "conv")
    tok = AutoTokenizer.from_pretrained(str(out))
    for text in TEXTS:
        assert tok(text)["input_ids"] == [reference.bos_id()] + reference.encode(text), text
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == reference.decode(reference.encode(text))


@pytest.mark.parametrize("drop, needle", [
    ("*", "holds no tensors (a vocabulary-only GGUF): convert the model's GGUF"),
    (("blk.0.ffn_down.weight", "output_norm.weight"), "lacks 2 weight(s) of its LlamaForCausalLM (or holds them in "
     "another shape): model.layers.0.mlp.down_proj.weight, model.norm.weight; transformers would start them random")])
def test_a_gguf_without_its_weights_is_refused_before_anything_is_written(tmp_path, sp_tokenizer_dir, capsys, drop,
                                                                          needle):
    # a vocabulary-only GGUF (llama.cpp's ggml-vocab-llama-spm.gguf) made transformers build the random 7B model its
    # header describes (killed after 300 s); one without some weights converted with those started random, exit 0
    gguf = sentencepiece_gguf(tmp_path / "m.gguf", (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes(), drop=drop)
    _refused(gguf, tmp_path, capsys, needle)


@pytest.mark.parametrize("q_type", ["Q8_1", "F64", 99])
def test_a_tensor_type_the_gguf_package_cannot_dequantize_is_refused_naming_it(tmp_path, sp_tokenizer_dir, capsys,
                                                                                 q_type):
    # a type gguf knows but does not dequantize (Q8_1, F64, Q1_0 in gguf 0.19) ended in its NotImplementedError
    # traceback, exit 1; a type id it does not know (a newer llama.cpp's) was "truncated or corrupt; fetch it again"
    import struct

    from gguf import GGMLQuantizationType

    model = (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes()
    if q_type == 99:
        gguf = sentencepiece_gguf(tmp_path / "m.gguf", model)
        data = bytearray(gguf.read_bytes())  # the tensor table: name, n_dims (u32), dims (u64 each), type (u32)
        at = data.index(b"blk.0.attn_q.weight") + len(b"blk.0.attn_q.weight")
        struct.pack_into("<I", data, at + 4 + 8 * struct.unpack_from("<I", data, at)[0], 99)
        gguf.write_bytes(bytes(data))
        needle = "holds a tensor of type 99, which the gguf package (gguf "
    else:
        gguf = sentencepiece_gguf(tmp_path / "m.gguf", model, q_type=GGMLQuantizationType[q_type])
        needle = f"holds blk.0.ffn_down.weight in {q_type}, which the gguf package (gguf "
    line = _refused(gguf, tmp_path, capsys, needle)
    assert line.endswith(": pip install -U gguf, or convert another quantization of the model (F16, BF16, Q8_0, the "
                         "Q*_K ones)"), line


def _refused(gguf: Path, tmp_path: Path, capsys, needle: str) -> str:
    """``--gguf gguf`` is refused in one line holding ``needle``, exit 2, nothing written beside ``gguf``: the line."""
    from torchtune_longshort.models.gguf import main

    with pytest.raises(SystemExit) as exit_info:
        main(["--gguf", str(gguf), "--out", str(tmp_path / "new" / "conv")])
    err = capsys.readouterr().err  # transformers' progress bars come first once it has read the file
    assert exit_info.value.code == 2 and err.count("error:") == 1 and needle in err.splitlines()[-1], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]
    return err.splitlines()[-1]


def test_an_architecture_transformers_does_not_convert_is_refused_naming_the_file_and_what_converts(tmp_path, capsys):
    # transformers' "GGUF model with architecture rwkv6 is not supported yet." named neither the file nor a fix
    from gguf import GGUFWriter

    gguf = tmp_path / "m.gguf"
    w = GGUFWriter(str(gguf), "rwkv6")
    w.add_tensor("token_embd.weight", np.zeros((8, 16), np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()
    line = _refused(gguf, tmp_path, capsys, f"--gguf {str(gguf)!r} is a rwkv6 model (its general.architecture), which "
                    "transformers does not convert from GGUF: convert a GGUF of an architecture this project trains: "
                    "llama (")
    assert line.endswith("mistral, qwen2, phi3"), line
