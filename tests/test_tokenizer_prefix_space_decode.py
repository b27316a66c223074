"""A SentencePiece folder decodes as ``AutoTokenizer`` on it does, for every ``legacy`` x ``add_prefix_space`` of
transformers' ``LlamaTokenizer`` (set, false or absent), on a model with and without SentencePiece's dummy prefix.

transformers builds its own pipeline for that class: a ``Strip`` of the text's first space in its decoder unless
``add_prefix_space`` is false. The ``sentencepiece`` format decoded with SentencePiece, which drops a leading ``▁``
by the model's dummy prefix instead: with ``add_prefix_space: false`` ``[▁the, <0x7C>, ter]`` read ``'the|ter'``
where ``AutoTokenizer`` (lm-eval's ``hf``) reads ``' the|ter'`` (168 of 2,000 random id sequences), and a model
without the dummy prefix kept the space ``AutoTokenizer`` strips. Encoding, which already matched, is checked too,
and so is ``decode(..., skip_special_tokens=False)``, which showed a special token as nothing (SentencePiece's
``[<s>, ▁the, </s>]``: ``'the'``, ``AutoTokenizer``'s ``'<s> the</s>'``).
A Gemma-style ``tokenizer.json`` (no ``Strip``) on a dummy-prefix model is the same case without the class.
``AutoTokenizer`` on the same folder is the reference.
"""

from __future__ import annotations

import itertools
import json
import random
import shutil

import pytest

TEXTS = [" hello", "hello", "  hello", "<s>hello", "<s> hello", "a <s>b", "\nhello the"]
COMBOS = [(dummy, legacy, aps) for dummy, legacy, aps in itertools.product(
    (True, False), (True, False, None), (True, False, None)) if dummy or legacy is None]


@pytest.fixture(scope="module")
def no_dummy_model(sp_tokenizer_dir, tmp_path_factory):
    from torchtune_longshort.models.added_tokens import without_dummy_prefix

    path = tmp_path_factory.mktemp("no_dummy") / "tokenizer.model"
    path.write_bytes(without_dummy_prefix((sp_tokenizer_dir / "tokenizer.model").read_bytes()))
    return path


def _folder(sp_tokenizer_dir, model, folder, config, spec=None):
    folder.mkdir()
    shutil.copy(model, folder / "tokenizer.model")
    (folder / "tokenizer.json").write_text(json.dumps(spec) if spec else (sp_tokenizer_dir / "tokenizer.json")
                                           .read_text())
    cfg = json.loads((sp_tokenizer_dir / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps({**cfg, **config}))
    return folder


def _assert_like_autotokenizer(folder):
    from transformers import AutoTokenizer

    from torchtune_longshort.models import load_tokenizer

    ours, ref = load_tokenizer(folder / "tokenizer.model"), AutoTokenizer.from_pretrained(str(folder))
    for text in TEXTS:
        assert ours.encode_plain(text) == ref(text, add_special_tokens=False).input_ids, text
    the, bar, space, blank = (ref.convert_tokens_to_ids(p) for p in ("\u2581the", "<0x7C>", "<0x20>", "\u2581"))
    cases = [[the, bar], [ours.bos_id, the], [blank, the], [space, the], [bar, the], [the]]
    rng = random.Random(0)
    cases += [[rng.randrange(ours.vocab_size) for _ in range(rng.randrange(10))] for _ in range(150)]
    for ids in cases:
        assert ours.decode(ids) == ref.decode(ids, skip_special_tokens=True), ids
    # special tokens kept: each read as its text ('<s> the</s>'), where SentencePiece gave none ('the')
    kept = [ours.bos_id, ours.eos_id, ref.unk_token_id, the, bar, space, blank]
    cases += [[rng.choice(kept) for _ in range(rng.randrange(1, 8))] for _ in range(100)]
    for ids in cases:
        assert ours.decode(ids, skip_special_tokens=False) == ref.decode(ids, skip_special_tokens=False), ids
    return ours


@pytest.mark.parametrize("dummy,legacy,aps", COMBOS)
def test_llama_tokenizer_folders_decode_as_autotokenizer(sp_tokenizer_dir, no_dummy_model, tmp_path, dummy, legacy,
                                                         aps):
    config = {"tokenizer_class": "LlamaTokenizer", **({} if legacy is None else {"legacy": legacy}),
              **({} if aps is None else {"add_prefix_space": aps})}
    model = sp_tokenizer_dir / "tokenizer.model" if dummy else no_dummy_model
    ours = _assert_like_autotokenizer(_folder(sp_tokenizer_dir, model, tmp_path / "llama", config))
    the = ours._tt.spm_model.piece_to_id("\u2581the")
    assert ours.decode([the]) == ("the" if aps is not False else " the")  # transformers' Strip(" ", left=1) or none


def test_a_gemma_style_pipeline_keeps_the_leading_space(sp_tokenizer_dir, tmp_path):
    """``tokenizer.json`` turning spaces into ``▁`` with nothing prepended, its decoder without ``Strip``."""
    spec = json.loads((sp_tokenizer_dir / "tokenizer.json").read_text())
    spec["normalizer"] = {"type": "Replace", "pattern": {"String": " "}, "content": "\u2581"}
    spec["decoder"]["decoders"] = [d for d in spec["decoder"]["decoders"] if d["type"] != "Strip"]
    folder = _folder(sp_tokenizer_dir, sp_tokenizer_dir / "tokenizer.model", tmp_path / "gemma", {}, spec)
    ours = _assert_like_autotokenizer(folder)
    assert ours.decode([ours._tt.spm_model.piece_to_id("\u2581the")]) == " the"
