"""A run of SentencePiece byte pieces that is no UTF-8 decodes as the folder's ``tokenizer.json`` decodes it.

lm-eval's ``hf`` model decodes with ``AutoTokenizer`` (``ByteFallback``: such a run gives one U+FFFD per byte);
SentencePiece kept the run's valid bytes, so the ``longshort`` model's greedy text of a 3-step tiny checkpoint on a
passkey prompt read ``... thx\ufffdate`` where ``hf``'s, of the same token ids, read ``... th\ufffd\ufffdate``.
``AutoTokenizer`` on the same folder is the reference.
"""

from __future__ import annotations

import random


def _pair(sp_tokenizer_dir):
    from transformers import AutoTokenizer

    from torchtune_longshort.models import load_tokenizer

    return load_tokenizer(sp_tokenizer_dir / "tokenizer.model"), AutoTokenizer.from_pretrained(str(sp_tokenizer_dir))


def test_byte_runs_decode_as_autotokenizer(sp_tokenizer_dir):
    """The cases by hand, then 300 random id sequences (none led by the byte piece of a space: ``AutoTokenizer``
    strips that space as the text's first, SentencePiece keeps it, as before; no run that is no UTF-8 involved)."""
    ours, ref = _pair(sp_tokenizer_dir)
    byte = {b: ref.convert_tokens_to_ids(f"<0x{b:02X}>") for b in (0x20, 0x78, 0x88, 0xB0, 0xD4, 0xC3, 0xA9)}
    word = ref("value the", add_special_tokens=False).input_ids
    cases = [[byte[0x78], byte[0x88]], word + [byte[0x78], byte[0x88]] + word,
             [byte[0xB0]] + word + [byte[0xC3], byte[0xA9]] + word + [byte[0xD4]], word + [byte[0xC3]]]
    for ids in cases:
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), ids
    assert ours.decode(cases[0]) == "\ufffd\ufffd"
    rng = random.Random(0)
    for _ in range(300):
        ids = [rng.randrange(ours.vocab_size) for _ in range(rng.randrange(12))]
        if ids[:1] != [byte[0x20]]:
            assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), ids
