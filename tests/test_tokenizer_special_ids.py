"""A trained tokenizer's special ids are Llama-2's, as ``train_sentencepiece`` documents (0/1/2 unk/bos/eos): a hand
mutant swapping bos and eos survived every tokenizer test (mutants28), and a model fine-tuned from it would start each
window with the end-of-text token. The reference: sentencepiece's own processor reading the written model."""

from __future__ import annotations

from torchtune_longshort.data.tokenizer_training import train_sentencepiece


def test_unk_bos_eos_are_0_1_2_as_in_llama2(tmp_path):
    import sentencepiece as spm

    texts = ["def f(x):\n    return x + 1\n" * 20, "class A:\n    pass\n" * 20]
    path = train_sentencepiece(texts, tmp_path / "tok", vocab_size=300)
    sp = spm.SentencePieceProcessor(model_file=str(path))
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert [sp.id_to_piece(i) for i in (0, 1, 2)] == ["<unk>", "<s>", "</s>"]  # Llama-2's pieces
