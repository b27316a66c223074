"""Whitespace-led text and special-token strings, every tokenizer format against an independent reference.

* The ``tokenizer.json`` written beside a bare SentencePiece model (``write_hf_tokenizer_files``, the tiny configs'
  tokenizer) gives ``AutoTokenizer`` SentencePiece's own ids and text: its Metaspace pre-tokenizer dropped the first
  space of a text that starts with one (``" starts with space"``: 1, 390, ... instead of 1, 259, 283, ...).
"""

from __future__ import annotations

PLAIN = [" starts with space", "  leading spaces\n\n\n\ttabs\t\t and   runs    of     spaces   ", "ends with space ",
         "\nstarts with newline", " ", "   ", "", "a", "héllo wörld — naïve café ☕ 日本語のテキスト 🤖🏳️‍🌈",
         "digits 1234567890 3.14159 1e-10 0x1F 2026-12-02", "x" * 50 + " " * 20 + "y"]


def test_written_tokenizer_json_gives_sentencepiece_ids_on_whitespace_led_text(sp_tokenizer_dir):
    import sentencepiece as spm
    from transformers import AutoTokenizer

    from torchtune_longshort.models import load_tokenizer

    sp = spm.SentencePieceProcessor(model_file=str(sp_tokenizer_dir / "tokenizer.model"))
    ref = AutoTokenizer.from_pretrained(str(sp_tokenizer_dir))
    as_json = load_tokenizer(sp_tokenizer_dir / "tokenizer.json")
    for text in PLAIN:
        assert ref(text).input_ids == [sp.bos_id()] + sp.encode(text), text
        assert as_json.encode_plain(text) == sp.encode(text), text
        assert ref.decode(sp.encode(text)) == sp.decode(sp.encode(text)), text
    assert ref(" starts with space").input_ids[:2] == [sp.bos_id(), *sp.encode(" ")]  # "▁▁": the space is kept
