"""A tokenizer path is a folder holding ``tokenizer.model`` or the ``.model`` file itself, everywhere.

The study passes a base's own ``tokenizer.model`` file (``base.tokenizer``) to the recipe's stdlib tokenizer
component; that component used to treat every path as a folder to train into, and failed on the file.
"""

import os

import pytest
import sentencepiece as spm

from torchtune_longshort.data.tokenizer_training import sentencepiece_file
from torchtune_longshort.training.bootstrap import stdlib_sentencepiece_tokenizer


def test_sentencepiece_file_of_a_folder_and_of_a_file(sp_tokenizer_dir, tmp_path):
    model = sp_tokenizer_dir / "tokenizer.model"
    assert sentencepiece_file(sp_tokenizer_dir) == model
    assert sentencepiece_file(model) == model
    assert sentencepiece_file(tmp_path / "new") == tmp_path / "new" / "tokenizer.model"  # a folder to train


def test_stdlib_component_loads_an_existing_model_file_and_trains_nothing(sp_tokenizer_dir):
    model = sp_tokenizer_dir / "tokenizer.model"
    before = sorted(os.listdir(sp_tokenizer_dir))
    tok = stdlib_sentencepiece_tokenizer(path=str(model), vocab_size=4096)  # vocab_size ignored: nothing trained
    text = "def f(x):\n    return x + 1\n"
    assert tok.encode(text, add_bos=False, add_eos=False) == spm.SentencePieceProcessor(model_file=str(model)).encode(text)
    assert sorted(os.listdir(sp_tokenizer_dir)) == before


def test_stdlib_component_refuses_a_missing_model_file_without_creating_it(tmp_path):
    missing = tmp_path / "base" / "tokenizer.model"
    with pytest.raises(FileNotFoundError, match="tokenizer.model"):
        stdlib_sentencepiece_tokenizer(path=str(missing))
    assert not (tmp_path / "base").exists()
