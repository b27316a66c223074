"""A tokenizer vocab_size the training text cannot fit (fewer pieces than its characters plus the byte and special
pieces) is refused in sentencepiece's own number, naming tokenizer.vocab_size, with nothing left on disk; before, the
recipe said 'tokenizer.path=...: ... cannot read it (RuntimeError: INTERNAL: src/trainer_interface.cc(638) ...)'."""

import pytest

from torchtune_longshort.data.tokenizer_training import train_sentencepiece
from torchtune_longshort.training.recipe_config.components import TokenizerConfig
from torchtune_longshort.training.recipe_config.tokenizer_check import load_tokenizer

# 46 distinct characters (20 Greek, 26 Latin), each common enough that sentencepiece keeps them all
_TEXT = "".join(chr(0x3B1 + i % 20) + chr(ord("a") + i % 26) for i in range(2000))
_DOCS = [_TEXT[i:i + 80] for i in range(0, len(_TEXT), 80)]


def test_the_floor_is_sentencepiece_own(tmp_path):
    from torchtune_longshort.data.tokenizer_training import VocabBelowCharacters

    with pytest.raises(VocabBelowCharacters) as refused:
        train_sentencepiece(_DOCS, tmp_path / "small", vocab_size=300)
    needed = refused.value.needed
    # the reference, counted here: one piece per character (and the '▁' every line starts with), 256 bytes, unk/bos/eos
    assert needed == len(set(_TEXT) | {"\u2581"}) + 256 + 3
    assert str(refused.value) == (f"vocab_size=300 is smaller than the {needed} pieces sentencepiece needs for the "
                                  "text it trains on (one per distinct character it keeps, plus 256 byte pieces and "
                                  f"unk/bos/eos): raise vocab_size to at least {needed}")
    assert not (tmp_path / "small").exists()  # refused before anything was written
    with pytest.raises(VocabBelowCharacters):  # sentencepiece itself: one fewer is refused, the number trains
        train_sentencepiece(_DOCS, tmp_path / "one_fewer", vocab_size=needed - 1)
    assert train_sentencepiece(_DOCS, tmp_path / "enough", vocab_size=needed).is_file()


def test_the_recipe_names_tokenizer_vocab_size_and_leaves_no_folder(tmp_path):
    folder = tmp_path / "tokenizers" / "v300"
    component = "torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer"
    args = {"path": str(folder), "vocab_size": 300, "train_files_limit": 3}
    with pytest.raises(ValueError) as refused:
        load_tokenizer(TokenizerConfig(component=component, path=str(folder), args=args))
    line = str(refused.value)
    assert line.startswith("tokenizer.vocab_size=300 is smaller than the ") and "\n" not in line, line
    needed = int(line.rsplit(" ", 1)[1])
    assert line.endswith(f"raise tokenizer.vocab_size (and model.vocab_size) to at least {needed}")
    assert not (tmp_path / "tokenizers").exists()  # the folder (and its parent) this call would have made
    args["vocab_size"] = needed  # sentencepiece trains that many on the same files
    assert load_tokenizer(TokenizerConfig(component=component, path=str(folder), args=args)).vocab_size == needed


def test_validate_refuses_the_vocab_size_the_training_would_refuse(tmp_path, capsys):
    """longshort-validate said OK of tokenizer.vocab_size=300 for the stdlib files the tokenizer trains on, which the
    training then refused; it now asks sentencepiece's count without training (the reference: training those same
    files at 300 refused, its number; that number trains), refusing in the same words, nothing written."""
    from torchtune_longshort.data.stdlib_corpus import stdlib_document, stdlib_source_files
    from torchtune_longshort.data.tokenizer_training import VocabBelowCharacters
    from torchtune_longshort.training.recipe_config.validate import main

    docs = [stdlib_document(f) for f in stdlib_source_files(limit=3, include_tests=False)]
    with pytest.raises(VocabBelowCharacters) as trained:
        train_sentencepiece(docs, tmp_path / "reference", vocab_size=300)
    needed = trained.value.needed

    def validate(vocab):
        return main(["tiny/longshort_stdlib.yaml", f"tokenizer.path={tmp_path / 'tok'}", "tokenizer.train_files_limit=3",
                     f"tokenizer.vocab_size={vocab}", f"model.vocab_size={vocab}", f"output_dir={tmp_path / 'out'}"])

    with pytest.raises(SystemExit) as refused:
        validate(300)
    err = capsys.readouterr().err.strip()
    assert refused.value.code == 2 and "\n" not in err, err
    assert err.endswith(f"error: tokenizer.vocab_size=300 is smaller than the {needed} pieces sentencepiece needs for "
                        "the text it trains on (one per distinct character it keeps, plus 256 byte pieces and "
                        f"unk/bos/eos): raise tokenizer.vocab_size (and model.vocab_size) to at least {needed}"), err
    assert validate(needed) == 0 and sorted(p.name for p in tmp_path.iterdir()) == []
    assert train_sentencepiece(docs, tmp_path / "enough", vocab_size=needed).is_file()
