"""`--gguf F --out DIR` on GGUF files of the kinds users have, written here with the gguf package (skipped without it):
the converted folder's tokenizer encodes as the file's own runtime does (llama.cpp, which encodes a SentencePiece
vocabulary as sentencepiece does); a file without the weights its header describes is refused, nothing written."""

import re
from pathlib import Path
from typing import Optional

import numpy as np
import pytest

pytest.importorskip("gguf")

# texts starting with spaces are where transformers' Metaspace pipeline and sentencepiece part
TEXTS = [" Hello world", "  two spaces", "   three\n    four", "Hello, world!", " (", "\tTab", "a  b   c"]


def sentencepiece_gguf(path: Path, sp_model: bytes, add_space_prefix: Optional[bool] = True, drop=(), q_type=None,
                       reshape=None) -> Path:
    """A tiny random Llama GGUF (hidden 16, one layer) whose vocabulary is the SentencePiece model ``sp_model`` (the
    fields llama.cpp's converter writes for one: pieces, scores, piece types); the tensors named in ``drop`` left
    out (all of them: ``drop="*"``); ``add_space_prefix=None``: that key left out (older converters, hand-made files);
    ``q_type``: a GGMLQuantizationType the ffn_down weight is stored in
    (zero blocks); ``reshape``: {tensor name: the shape it is written in instead}."""
    from gguf import GGUFWriter
    from sentencepiece import sentencepiece_model_pb2 as pb

    m = pb.ModelProto()
    m.ParseFromString(sp_model)
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("llama"), w.add_tokenizer_pre("default")
    w.add_token_list([p.piece for p in m.pieces]), w.add_token_scores([p.score for p in m.pieces])
    w.add_token_types([int(p.type) for p in m.pieces])
    w.add_bos_token_id(1), w.add_eos_token_id(2), w.add_unk_token_id(0), w.add_add_bos_token(True)
    if add_space_prefix is not None:
        w.add_add_space_prefix(add_space_prefix)
    _with_weights(w, len(m.pieces), drop, q_type, reshape)
    return path


def _with_weights(w, vocab_size: int, drop=(), q_type=None, reshape=None) -> None:
    """``w`` (a GGUFWriter of a Llama GGUF, its tokenizer fields given) with the weights of a tiny random Llama
    (hidden 16, one layer), written and closed."""
    from gguf import quants

    rng, dim, ffn = np.random.default_rng(0), 16, 32
    w.add_context_length(64), w.add_embedding_length(dim), w.add_block_count(1), w.add_feed_forward_length(ffn)
    w.add_head_count(2), w.add_head_count_kv(1), w.add_layer_norm_rms_eps(1e-5), w.add_rope_dimension_count(8)
    shapes = {"token_embd.weight": (vocab_size, dim), "output_norm.weight": (dim,),
              "blk.0.attn_norm.weight": (dim,), "blk.0.ffn_norm.weight": (dim,), "blk.0.attn_q.weight": (dim, dim),
              "blk.0.attn_k.weight": (8, dim), "blk.0.attn_v.weight": (8, dim), "blk.0.attn_output.weight": (dim, dim),
              "blk.0.ffn_gate.weight": (ffn, dim), "blk.0.ffn_up.weight": (ffn, dim),
              "blk.0.ffn_down.weight": (dim, ffn), **(reshape or {})}
    for name, shape in shapes.items() if drop != "*" else ():
        if q_type is not None and name == "blk.0.ffn_down.weight":
            block, size = quants.GGML_QUANT_SIZES[q_type]
            w.add_tensor(name, np.zeros((shape[0], shape[1] * size // block), np.uint8), raw_dtype=q_type)
        elif name not in drop:
            w.add_tensor(name, rng.standard_normal(shape).astype(np.float32))
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_tensors_to_file(), w.close()


@pytest.mark.parametrize("add_space_prefix", [True, False, None])
def test_a_sentencepiece_gguf_converts_to_a_tokenizer_that_encodes_as_sentencepiece(tmp_path, sp_tokenizer_dir,
                                                                                     add_space_prefix):
    # transformers' Metaspace pipeline (prepend_scheme first) prepended no "▁" to a text starting with a space:
    # " Hello world" lost its space, where llama.cpp and sentencepiece keep it (llama.cpp's own ggml-vocab-llama-spm
    # test: 15 of 47 texts differed); with add_space_prefix false it prepended one llama.cpp does not. A file without
    # the key (None) prepends one: llama-vocab.cpp's SPM default, as sentencepiece's own add_dummy_prefix default
    import sentencepiece as spm
    from sentencepiece import sentencepiece_model_pb2 as pb
    from transformers import AutoTokenizer

    from torchtune_longshort.models.gguf import convert_gguf

    model = (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes()
    proto = pb.ModelProto()
    proto.ParseFromString(model)
    proto.normalizer_spec.add_dummy_prefix = add_space_prefix is not False
    reference = spm.SentencePieceProcessor(model_proto=proto.SerializeToString())
    gguf = sentencepiece_gguf(tmp_path / "m.gguf", model, add_space_prefix)
    out = convert_gguf(gguf, tmp_path / "conv")
    tok = AutoTokenizer.from_pretrained(str(out))
    for text in TEXTS:
        assert tok(text)["input_ids"] == [reference.bos_id()] + reference.encode(text), text
        assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == reference.decode(reference.encode(text))


def byte_level_gguf(path: Path, pre: Optional[str]) -> Path:
    """A tiny random Llama GGUF whose vocabulary is a byte-level BPE one (``tokenizer.ggml.model`` gpt2, as SmolLM2's)
    with pre-type ``pre``: the 256 byte symbols, :data:`MERGES` and ``<|endoftext|>``."""
    from gguf import GGUFWriter

    tokens = _byte_level_vocab()
    w = GGUFWriter(str(path), "llama")
    w.add_tokenizer_model("gpt2"), w.add_token_list(tokens)
    if pre is not None:  # None: a file without tokenizer.ggml.pre (llama.cpp reads it as 'default', with a warning)
        w.add_tokenizer_pre(pre)
    w.add_token_types([3 if t == "<|endoftext|>" else 1 for t in tokens]), w.add_token_merges(MERGES)
    w.add_bos_token_id(len(tokens) - 1), w.add_eos_token_id(len(tokens) - 1), w.add_add_bos_token(False)
    _with_weights(w, len(tokens))
    return path


# merges across digits and the spaces before them: where a split of each digit first encodes otherwise
MERGES = ["Ġ Ġ", "ĠĠ ĠĠ", "Ċ ĠĠĠĠ", "ĠĠĠĠ ĠĠĠĠ", "Ġ 1", "1 2", "Ġ1 2", "2 0", "20 2", "Ġ 0", "Ġ x", "x 1",
          "Ġ =", "Ġx 1", "ĊĠĠĠĠ ĠĠĠĠ", "ĠĠĠĠ 0"]
DIGIT_TEXTS = ["x = 12", "\n        0", "2024 is 1202", "  12 x1 x12", "v1.20\t 3", "１２ ٣٤", "a\n\n  2020\n"]


def _byte_level_vocab() -> list:
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    symbols = list(bytes_to_unicode().values())
    merged = [a + b for a, b in (m.split(" ") for m in MERGES)]
    return symbols + [m for m in dict.fromkeys(merged) if m not in symbols] + ["<|endoftext|>"]


def _hub_reference(pre_tokenizer: dict):
    """A ``tokenizers`` Tokenizer of :data:`MERGES`'s vocabulary with ``pre_tokenizer`` (a tokenizer.json's)."""
    import json

    from tokenizers import Tokenizer

    vocab = {t: i for i, t in enumerate(_byte_level_vocab())}
    return Tokenizer.from_str(json.dumps({
        "version": "1.0", "added_tokens": [], "normalizer": None, "pre_tokenizer": pre_tokenizer,
        "post_processor": None, "decoder": None,
        "model": {"type": "BPE", "vocab": vocab, "merges": MERGES, "dropout": None, "unk_token": None}}))


# the hub SmolLM2-135M(-Instruct) tokenizer.json's pre_tokenizer (StarCoder's alike): llama.cpp's SMOLLM split
HUB_SMOLLM2 = {"type": "Sequence", "pretokenizers": [
    {"type": "Digits", "individual_digits": True},
    {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}]}


# llama.cpp's llama-vocab.cpp: one case of regex_exprs {\p{N}, GPT-2's} for these pre-types, GPT-2's alone for the
# others
@pytest.mark.parametrize("pre", ["smollm", "starcoder", "refact", "command-r", "codeshell", "exaone", "minerva-7b"])
def test_a_smollm_gguf_converts_to_a_tokenizer_that_splits_each_digit_as_the_hub_one(tmp_path, pre, capsys):
    # transformers ignores tokenizer.ggml.pre "smollm": the converted tokenizer.json had ByteLevel alone, and
    # "\n        0" or "2024" encoded otherwise than SmolLM2 was trained with (6 of 40 stdlib .py files differed)
    from transformers import AutoTokenizer

    from torchtune_longshort.models.gguf import convert_gguf

    out = convert_gguf(byte_level_gguf(tmp_path / "m.gguf", pre), tmp_path / "conv")
    tok, reference = AutoTokenizer.from_pretrained(str(out)), _hub_reference(HUB_SMOLLM2)
    assert [tok(t, add_special_tokens=False)["input_ids"] for t in DIGIT_TEXTS + TEXTS] == [
        reference.encode(t).ids for t in DIGIT_TEXTS + TEXTS]
    assert "note:" not in capsys.readouterr().err


@pytest.mark.parametrize("pre, note", [*((p, False) for p in ("gpt-2", "phi-2", "mpt", "olmo", "jais")),
                                       ("deepseek-coder", True)])
def test_a_byte_level_pre_type_splits_as_gpt2_and_one_this_converter_does_not_know_is_noted(tmp_path, capsys, pre,
                                                                                            note):
    from transformers import AutoTokenizer

    from torchtune_longshort.models.gguf import convert_gguf

    gguf = byte_level_gguf(tmp_path / "m.gguf", pre)
    tok = AutoTokenizer.from_pretrained(str(convert_gguf(gguf, tmp_path / "conv")))
    gpt2 = _hub_reference({"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True})
    assert [tok(t)["input_ids"] for t in DIGIT_TEXTS] == [gpt2.encode(t).ids for t in DIGIT_TEXTS]
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == ([f"note: --gguf {str(gguf)!r} splits text as llama.cpp's pre-tokenizer 'deepseek-coder' "
                      "(tokenizer.ggml.pre), which neither transformers nor this converter knows: its tokenizer.json "
                      "splits as GPT-2 does, and may encode some texts (digits, whitespace) otherwise than llama.cpp"]
                     if note else [])


@pytest.mark.parametrize("pre", ["llama-bpe", "qwen2", None])
def test_a_split_transformers_reads_is_kept_and_a_file_without_a_pre_type_is_noted(tmp_path, capsys, pre):
    # transformers gives Llama-3's and Qwen2's pre-types their own split (a Sequence, not ByteLevel alone): it is
    # what llama.cpp splits by, kept without a note; a file without tokenizer.ggml.pre is llama.cpp's 'default'
    # (not GPT-2's split), noted. Reference: transformers' own tokenizer of the file.
    import json

    from transformers import AutoTokenizer

    from torchtune_longshort.models.gguf import convert_gguf

    gguf = byte_level_gguf(tmp_path / "m.gguf", pre)
    own = json.loads(AutoTokenizer.from_pretrained(str(tmp_path), gguf_file=gguf.name).backend_tokenizer.to_str())
    out = convert_gguf(gguf, tmp_path / "conv")
    written = json.loads((out / "tokenizer.json").read_text())
    assert written["pre_tokenizer"] == own["pre_tokenizer"]
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note:")]
    assert notes == ([] if pre else [f"note: --gguf {str(gguf)!r} splits text as llama.cpp's pre-tokenizer 'default' "
                                     "(tokenizer.ggml.pre), which neither transformers nor this converter knows: its "
                                     "tokenizer.json splits as GPT-2 does, and may encode some texts (digits, "
                                     "whitespace) otherwise than llama.cpp"])


@pytest.mark.parametrize("drop, needle", [
    ("*", "holds no tensors (a vocabulary-only GGUF): convert the model's GGUF"),
    (("blk.0.ffn_down.weight", "output_norm.weight"), "lacks 2 weights of its LlamaForCausalLM (or holds them in "
     "another shape): model.layers.0.mlp.down_proj.weight, model.norm.weight; transformers would start them random"),
    ({"blk.0.ffn_up.weight": (24, 16)}, "lacks 1 weight of its LlamaForCausalLM (or holds them in another shape): "
     "model.layers.0.mlp.up_proj.weight; transformers would start them random")])
def test_a_gguf_without_its_weights_is_refused_before_anything_is_written(tmp_path, sp_tokenizer_dir, capsys, drop,
                                                                          needle):
    # a vocabulary-only GGUF (llama.cpp's ggml-vocab-llama-spm.gguf) made transformers build the random 7B model its
    # header describes (killed after 300 s); one without some weights converted with those started random, exit 0;
    # one with a weight of another shape (ffn_up 24 x 16 where its header says 32) ended in transformers'
    # "RuntimeError: You set `ignore_mismatched_sizes` to `False`" traceback, exit 1
    model = (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes()
    gguf = sentencepiece_gguf(tmp_path / "m.gguf", model, **({"reshape": drop} if isinstance(drop, dict) else
                                                              {"drop": drop}))
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

    import logging
    import sys

    from transformers.utils import logging as hf_logging

    hf_logging.get_logger("transformers")  # its handler made now if no test made it yet
    # transformers' handler writes to the stderr of its first use, before capsys's: to capsys's, as to a terminal
    # (its StreamHandlers alone: a test run may have left pytest's live-logging NullHandler there too)
    # set, not flushed (setStream flushes): the stream it holds may be an earlier test's capture, closed since (made
    # under one test's capsys, the handler's flush raised 'I/O operation on closed file' in the next test's call)
    was = [(h, h.stream) for h in logging.getLogger("transformers").handlers if isinstance(h, logging.StreamHandler)]
    for h, _ in was:
        h.stream = sys.stderr
    try:
        with pytest.raises(SystemExit) as exit_info:
            main(["--gguf", str(gguf), "--out", str(tmp_path / "new" / "conv")])
    finally:
        for h, stream in was:  # a capture (this test's or a closed one) is not left behind: the live stderr instead
            h.stream = sys.__stderr__ if stream is sys.stderr or getattr(stream, "closed", False) else stream
    out, err = capsys.readouterr()
    # transformers' progress bars come first once it has read the file; its load report ('MISSING ... Consider
    # training on your downstream task', 'MISMATCH ... Reinit due to size mismatch') came before the refusal
    said = [line for line in err.splitlines() if line.strip() and not PROGRESS.match(line)]
    assert exit_info.value.code == 2 and not out and len(said) == 1 and needle in said[0], err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf"]
    return said[0]


# one state of a tqdm bar (each ends in a carriage return): 'Loading weights: 100%|####| 9/9 [00:00<00:00, 2.1it/s]'
PROGRESS = re.compile(r"^[\w .-]+: +\d+%\|[^|]*\| *\d+/\d+ \[[^\]]*\]$")


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


def test_a_conversion_the_disk_cannot_hold_is_refused_before_the_model_is_built(tmp_path, sp_tokenizer_dir, capsys,
                                                                                monkeypatch):
    # --gguf wrote until the disk was full (--model asked for room first): a Q4 file's float32 folder is about 8
    # times the file. The reference for the size asked: the weights file an unrefused conversion writes.
    from torchtune_longshort import disk_space
    from torchtune_longshort.models.gguf import convert_gguf
    from torchtune_longshort.models.gguf_checks import check_readable, converted_bytes

    model = (Path(sp_tokenizer_dir) / "tokenizer.model").read_bytes()
    (tmp_path / "ref").mkdir()
    gguf = sentencepiece_gguf(tmp_path / "ref" / "m.gguf", model)
    written = _weight_bytes(convert_gguf(gguf, tmp_path / "ref" / "conv") / "model.safetensors")
    need = converted_bytes(check_readable(gguf), "float32")
    # the weights' bytes, not their elements: 64 KiB of slack on this tiny model took a size of 1 byte per element
    assert need == written
    monkeypatch.setattr(disk_space, "room", lambda path: (need - 1, 10 * need, Path("/")))
    (tmp_path / "full").mkdir()
    gguf = sentencepiece_gguf(tmp_path / "full" / "m.gguf", model)
    line = _refused(gguf, tmp_path / "full", capsys, "converting m.gguf into float32 weights needs at least")
    assert "free space there, or name an --out on a disk with room" in line


def _weight_bytes(safetensors: Path) -> int:
    """The bytes of the tensors a safetensors file holds, as its header gives their offsets (not the header's)."""
    import json
    import struct

    with open(safetensors, "rb") as f:
        header = json.loads(f.read(struct.unpack("<Q", f.read(8))[0]))
    return sum(v["data_offsets"][1] - v["data_offsets"][0] for k, v in header.items() if k != "__metadata__")
