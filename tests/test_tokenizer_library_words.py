"""A tokenizer file its component's library cannot read is refused naming tokenizer.path with the library's message;
that message was cut at 200 characters, so tiktoken's 'Error parsing line b'\\x0e' in <file>' lost the file's name
(the part saying which file) under a long folder. The message is now whole (the library's own str the reference),
and only a huge one is cut, saying so."""

import pytest

from user_modules import forget_user_module, write_user_module

from torchtune_longshort.refusals import LIBRARY_WORDS_CAP
from torchtune_longshort.training.recipe_config.components import TokenizerConfig
from torchtune_longshort.training.recipe_config.tokenizer_check import load_tokenizer


def _refusal(component: str, path: str) -> str:
    with pytest.raises(ValueError) as refused:
        load_tokenizer(TokenizerConfig(component=component, path=path, args={"path": path}))
    return str(refused.value)


def test_the_library_message_is_kept_whole(sp_tokenizer_dir, tmp_path):
    from torchtune.models.llama3 import llama3_tokenizer

    folder = tmp_path.joinpath(*["a_folder_of_tokenizers_brought_from_elsewhere"] * 4)
    folder.mkdir(parents=True)
    path = folder / "tokenizer.model"  # a SentencePiece file, given to the tiktoken reader
    path.write_bytes((sp_tokenizer_dir / "tokenizer.model").read_bytes())
    with pytest.raises(ValueError) as library:  # the reference: tiktoken's own words
        llama3_tokenizer(str(path))
    words = str(library.value)
    assert len(words) > 200 and words.endswith(str(path))
    line = _refusal("torchtune.models.llama3.llama3_tokenizer", str(path))
    assert f"cannot read it (ValueError: {words});" in line and "\n" not in line, line


def test_a_huge_library_message_is_cut_saying_so(tmp_path, monkeypatch):
    write_user_module(tmp_path / "mods", {"huge_tok.py": "def reader(path):\n    raise ValueError('x' * 5000)\n"},
                      monkeypatch)
    forget_user_module("huge_tok")
    line = _refusal("huge_tok.reader", str(tmp_path / "tokenizer.model"))
    cut = "x" * LIBRARY_WORDS_CAP + " ... (cut here: 5000 characters in all)"
    assert f"cannot read it (ValueError: {cut});" in line, line
    forget_user_module("huge_tok")
