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


def test_stdlib_component_never_trains_into_nor_replaces_a_users_folder(tmp_path):
    """A folder with the user's files and no tokenizer.model: before, the trained folder failed to rename onto it and
    the fallback deleted it, files and all. Now it is refused, untouched; an empty folder is trained into."""
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    with pytest.raises(FileExistsError, match=r"path='.*mine' is a folder that holds files and no tokenizer.model"):
        stdlib_sentencepiece_tokenizer(path=str(mine), train_files_limit=3)
    assert sorted(os.listdir(mine)) == ["notes.txt"] and (mine / "notes.txt").read_text() == "precious"
    assert sorted(os.listdir(tmp_path)) == ["mine"]  # no temporary folder left behind
    empty = tmp_path / "empty"
    empty.mkdir()
    stdlib_sentencepiece_tokenizer(path=str(empty), train_files_limit=3)
    assert (empty / "tokenizer.model").is_file()
    assert sorted(os.listdir(tmp_path)) == ["empty", "mine"]


def test_recipe_refuses_a_users_folder_as_the_tokenizer_to_train_before_any_output(tmp_path, tiny_llama2_dir):
    from recipe_config import make_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("precious")
    cfg = make_cfg(tiny_llama2_dir, mine, tmp_path / "out")
    cfg.tokenizer = {"_component_": "torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer",
                     "path": str(mine)}
    with pytest.raises(FileExistsError, match=r"^tokenizer.path='.*mine' is a folder that holds files and no "):
        LongShortFinetuneRecipe(cfg)
    assert not (tmp_path / "out").exists() and sorted(os.listdir(mine)) == ["notes.txt"]


def test_recipe_trains_no_tokenizer_it_then_refuses_nor_one_inside_output_dir(tmp_path, tiny_llama2_dir):
    """A tokenizer trained by a run its setup then refused stayed behind, and, its vocab_size being read only when it
    is trained, refused every later run with that path. A tokenizer trained inside output_dir filled the folder before
    the run claimed it (refused as not empty, for good). A tokenizer file its component cannot read ended in the
    library's traceback. Each is now refused in one message, with no folder left (nor the parents the training made:
    ``new/`` of ``tokenizer.path=new/tok`` stayed), and an empty folder of the user's is left empty (the refused
    run's tokenizer stayed in it, and refused every later run by its vocabulary)."""
    from recipe_config import make_cfg

    from torchtune_longshort.recipes.longshort_finetune import LongShortFinetuneRecipe

    def cfg(path, **args):
        c = make_cfg(tiny_llama2_dir, tmp_path, tmp_path / "out")
        c.tokenizer = {"_component_": "torchtune_longshort.training.bootstrap.stdlib_sentencepiece_tokenizer",
                       "path": str(path), "train_files_limit": 3, **args}
        return c

    junk, empty = tmp_path / "junk.model", tmp_path / "empty"
    junk.write_text("not a model")
    empty.mkdir()  # a folder the user made for it: trained into, and the refused run's files were left there
    cases = [(cfg(tmp_path / "new" / "tok", vocab_size=1024), r"tokenizer vocabulary \(1024 ids"),  # model's: 512
             (cfg(empty, vocab_size=1024), r"tokenizer vocabulary \(1024 ids"),
             (cfg(junk), r"^tokenizer.path='.*junk.model': .*stdlib_sentencepiece_tokenizer cannot read it"),
             (cfg(tmp_path / "out" / "tok"), r"^tokenizer.path='.*out/tok' lies inside output_dir=")]
    for c, match in cases:
        with pytest.raises(ValueError, match=match):
            r = LongShortFinetuneRecipe(c)
            r.setup()
        assert sorted(os.listdir(tmp_path)) == ["empty", "junk.model"] and os.listdir(empty) == []
