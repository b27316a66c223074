"""A run of SentencePiece byte pieces that is no UTF-8 decodes as the folder's ``tokenizer.json`` decodes it.

lm-eval's ``hf`` model decodes with ``AutoTokenizer`` (``ByteFallback``: such a run gives one U+FFFD per byte);
SentencePiece kept the run's valid bytes, so the ``longshort`` model's greedy text of a 3-step tiny checkpoint on a
passkey prompt read ``... thx\ufffdate`` where ``hf``'s, of the same token ids, read ``... th\ufffd\ufffdate``.
``AutoTokenizer`` on the same folder is the reference. A text led by the byte piece of a space (``<0x20>``) kept
that space where ``AutoTokenizer``'s decoder strips the text's first space (4 of 2,000 random id sequences on a tiny
run's tokenizer: ``' returnul'`` against ``'returnul'``).
"""

from __future__ import annotations

import random


def _pair(sp_tokenizer_dir):
    from transformers import AutoTokenizer

    from torchtune_longshort.models import load_tokenizer

    return load_tokenizer(sp_tokenizer_dir / "tokenizer.model"), AutoTokenizer.from_pretrained(str(sp_tokenizer_dir))


def test_byte_runs_decode_as_autotokenizer(sp_tokenizer_dir):
    """The cases by hand, then 300 random id sequences."""
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
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), ids


def test_a_text_led_by_the_byte_piece_of_a_space_decodes_as_autotokenizer(sp_tokenizer_dir, tmp_path):
    """``<0x20>`` first: the folder as written (a ``Strip`` in ``tokenizer.json``'s decoder) and transformers'
    ``LlamaTokenizer`` pipeline (its own decoder: ``Strip`` unless ``add_prefix_space`` is false) drop that space;
    an id sequence with a special id first, and a space byte that starts a run which is no UTF-8, alike."""
    import json
    import shutil

    llama = tmp_path / "llama"
    shutil.copytree(sp_tokenizer_dir, llama)
    cfg = json.loads((llama / "tokenizer_config.json").read_text())
    (llama / "tokenizer_config.json").write_text(json.dumps({**cfg, "tokenizer_class": "LlamaTokenizer",
                                                             "legacy": False}))
    for folder in (sp_tokenizer_dir, llama):
        ours, ref = _pair(folder)
        space, hi = (ref.convert_tokens_to_ids(f"<0x{b:02X}>") for b in (0x20, 0xD1))
        word, spaces = (ref("value the", add_special_tokens=False).input_ids,
                        ref("   x", add_special_tokens=False).input_ids)
        for ids in ([space] + word, [space] + spaces, [space, space] + word, [space, hi] + word, [space],
                    [ours.bos_id, space] + word, word + [space] + word):
            assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), (folder.name, ids)
        assert ours.decode([space] + word) == " value the"  # its space and the word's "▁", one stripped
        rng = random.Random(1)
        for _ in range(200):
            ids = [space] + [rng.randrange(ours.vocab_size) for _ in range(rng.randrange(8))]
            assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), (folder.name, ids)
