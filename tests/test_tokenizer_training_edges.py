"""The edges of data/tokenizer_training.py a tokenizer's training and its checks keep: a folder it trained is taken
again as it is (its tokenizer.json etc. beside tokenizer.model), a missing ``.model`` file is refused not trained
into, and the lines sentencepiece is asked about are the documents' non-blank ones, ``max_sentences`` at most.

References: the folder ``train_sentencepiece`` itself wrote; sentencepiece's own count on the texts spelt out
without the lines left out; 256 byte pieces + unk/bos/eos + each distinct character (``▁`` among them)."""

import os

import pytest

from torchtune_longshort.data.tokenizer_training import (check_new_tokenizer_path, check_training_folder,
                                                         pieces_needed)


def test_a_trained_folder_is_taken_again_and_a_users_folder_is_not(sp_tokenizer_dir, tmp_path):
    assert len(os.listdir(sp_tokenizer_dir)) > 1  # tokenizer.model and transformers' files beside it
    check_training_folder(sp_tokenizer_dir)  # nothing trained: the folder reused
    check_new_tokenizer_path(sp_tokenizer_dir, "tokenizer.path")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "notes.txt").write_text("mine")
    with pytest.raises(FileExistsError, match=r"^tokenizer.path='.*mine' is a folder that holds files and no "):
        check_new_tokenizer_path(tmp_path / "mine", "tokenizer.path")


def test_a_missing_model_file_is_refused_not_taken_for_a_folder_to_train(tmp_path):
    missing = tmp_path / "base" / "tokenizer.model"
    with pytest.raises(FileNotFoundError, match=r"^tokenizer.path='.*/base/tokenizer.model': no such SentencePiece "
                                                r"file \(name a tokenizer folder"):
        check_new_tokenizer_path(missing, "tokenizer.path")
    assert not (tmp_path / "base").exists()


def test_pieces_needed_counts_the_non_blank_lines_max_sentences_at_most():
    assert pieces_needed(["a"]) == 256 + 3 + 2  # 'a' and '▁'
    assert pieces_needed(["ab c"]) == 256 + 3 + 4
    # a whitespace-only line (an ideographic space, a character of its own) is no training line
    assert pieces_needed(["ab c\n\u3000\u3000\n"]) == pieces_needed(["ab c"])
    assert pieces_needed(["ab c\nxyz"], max_sentences=1) == pieces_needed(["ab c"])
    assert pieces_needed(["ab c\nxyz"], max_sentences=2) == pieces_needed(["ab c", "xyz"]) == 256 + 3 + 7


def test_ctrl_c_while_sentencepiece_reads_the_texts_is_raised_as_ctrl_c(tmp_path):
    """A real SIGINT, sent by the texts while sentencepiece reads them (a recipe Ctrl-C'd while it trains its
    tokenizer): Python's own KeyboardInterrupt comes out, not sentencepiece's ``RuntimeError("INTERNAL:
    KeyboardInterrupt")``, which the recipe reported as a refusal of tokenizer.path, exit 2; nothing written."""
    import signal

    from torchtune_longshort.data.tokenizer_training import train_sentencepiece

    def texts():
        yield "ab c\n" * 50
        os.kill(os.getpid(), signal.SIGINT)  # Python's default handler raises KeyboardInterrupt here
        yield "never read"

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            train_sentencepiece(texts(), tmp_path / "tok", vocab_size=300)
    finally:
        signal.signal(signal.SIGINT, previous)
    assert not (tmp_path / "tok").exists()


def test_the_same_texts_train_the_same_file_bytes_in_any_folder(tmp_path):
    """One tokenizer, one file: sentencepiece recorded the temporary model_prefix it wrote through in the model, so
    two trainings of the same texts into two folders gave equal pieces (the reference, read back by sentencepiece)
    but different bytes, and a tokenizer's checksum named no tokenizer."""
    import sentencepiece as spm

    from torchtune_longshort.data.tokenizer_training import train_sentencepiece

    texts = ["def f(x):\n    return x + 1\n", "class A:\n    pass\n"] * 3
    a = train_sentencepiece(texts, tmp_path / "a", vocab_size=300)
    b = train_sentencepiece(texts, tmp_path / "deeper" / "b", vocab_size=300)

    def pieces(f):
        sp = spm.SentencePieceProcessor(model_file=str(f))
        return [(sp.id_to_piece(i), sp.get_score(i)) for i in range(sp.get_piece_size())]

    assert pieces(a) == pieces(b) and len(pieces(a)) == 300
    assert a.read_bytes() == b.read_bytes()
    assert str(tmp_path).encode() not in a.read_bytes()
