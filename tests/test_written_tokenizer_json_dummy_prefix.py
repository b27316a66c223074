"""The ``tokenizer.json`` written beside a bare SentencePiece model gives SentencePiece's ids under ``AutoTokenizer``
for a model without the dummy prefix (``add_dummy_prefix: false``, as Gemma's) too.

``write_hf_tokenizer_files`` (``copy_tokenizer`` of ``tokenizer.path=<bare model>`` into every step folder) wrote a
normalizer that prepends ``▁`` whatever the model says: ``AutoTokenizer`` (lm-eval's ``hf``) encoded ``'hello'``
as ``▁h el lo`` where the run trained on SentencePiece's ``h el lo`` (a 512-piece model: ``[400, 337, 300]`` against
``[444, 337, 300]``), and ``' hello'`` as ``▁▁ h el lo`` for ``▁h el lo``. SentencePiece on the same model is the
reference.
"""

from __future__ import annotations

import pytest

TEXTS = ["hello", " hello", "a b", "  x\n y", "<s>hello", "héllo wörld", ""]


@pytest.mark.parametrize("dummy", [True, False])
def test_autotokenizer_on_the_written_folder_gives_sentencepiece_ids(sp_tokenizer_dir, tmp_path, dummy):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from torchtune_longshort.models import copy_tokenizer, load_tokenizer
    from torchtune_longshort.models.added_tokens import adds_dummy_prefix, without_dummy_prefix
    from torchtune_longshort.training.staging import unsaved_files

    raw = (sp_tokenizer_dir / "tokenizer.model").read_bytes()
    model = tmp_path / "bare.model"
    model.write_bytes(raw if dummy else without_dummy_prefix(raw))
    sp = spm.SentencePieceProcessor(model_file=str(model))
    assert adds_dummy_prefix(model.read_bytes()) == sp.encode("hello", out_type=str)[0].startswith("\u2581") == dummy
    out = tmp_path / "step"
    out.mkdir()
    copy_tokenizer(model, out)
    assert unsaved_files(out) == []  # transformers' files too: a killed save's folder is told from a user's by them
    ref, ours = AutoTokenizer.from_pretrained(str(out)), load_tokenizer(out / "tokenizer.model")
    for text in TEXTS:
        if "<s>" not in text:
            assert ref(text, add_special_tokens=False).input_ids == sp.encode(text), text
        assert ours.encode_plain(text) == ref(text, add_special_tokens=False).input_ids, text
        ids = sp.encode(text)
        assert ref.decode(ids) == sp.decode(ids) == ours.decode(ids), text


@pytest.mark.parametrize("values", [(1, 0), (0, 1), (0, 0, 1)])
def test_a_flag_written_twice_is_read_as_sentencepiece_reads_it(sp_tokenizer_dir, values):
    """A ``normalizer_spec`` holding ``add_dummy_prefix`` more than once (a merge of two messages, an edit appended
    to the bytes): protobuf takes the last, and so SentencePiece does; ``adds_dummy_prefix`` took the first, so the
    written ``tokenizer.json`` prepended ``▁`` for a model that adds none (or none for one that does). SentencePiece
    on the same bytes is the reference."""
    import sentencepiece as spm

    from torchtune_longshort.models.added_tokens import _drop_field, _encode_varint, _fields, adds_dummy_prefix

    out = bytearray()
    for field, value in _fields((sp_tokenizer_dir / "tokenizer.model").read_bytes()):
        assert isinstance(value, bytes), field  # every top-level field of a ModelProto is a message
        if field == 3:
            value = _drop_field(value, 3) + b"".join(bytes([0x18, v]) for v in values)
        out += _encode_varint(field << 3 | 2) + _encode_varint(len(value)) + value
    sp = spm.SentencePieceProcessor(model_proto=bytes(out))
    assert adds_dummy_prefix(bytes(out)) == sp.encode("hello", out_type=str)[0].startswith("\u2581") == bool(
        values[-1])
