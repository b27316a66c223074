"""A ``datasets``-backed source (a torchtune builder, ``corpus.hf_text``) whose cache ``datasets`` cannot make or
write (HOME naming a file, a read-only HF_HOME) is refused naming that cache and its variable: it read
"dataset (books.json) could not be loaded: NotADirectoryError: [Errno 20] Not a directory: '<home>/.cache'", naming
neither HF_HOME nor HF_DATASETS_CACHE."""

import json

import datasets.config
import pytest

from torchtune_longshort.data.torchtune_datasets import build_torchtune_dataset


@pytest.mark.parametrize("given", [True, False])
def test_an_unwritable_datasets_cache_is_named_with_its_variable(given, tmp_path, monkeypatch):
    from torchtune.datasets import text_completion_dataset

    books = tmp_path / "books.json"
    books.write_text(json.dumps({"text": "def f(x):\n    return x\n"}) + "\n")
    home = tmp_path / "home_is_a_file"
    home.write_text("")
    cache = home / ".cache" / "huggingface"
    # the folders datasets read from the environment at its import (HOME=<a file> there), as datasets.config has them
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", cache / "datasets")
    monkeypatch.setattr(datasets.config, "HF_MODULES_CACHE", cache / "modules")
    if given:
        monkeypatch.setenv("HF_DATASETS_CACHE", str(cache / "datasets"))
    else:
        monkeypatch.delenv("HF_DATASETS_CACHE", raising=False)
    args = {"source": "json", "data_files": str(books), "column": "text", "split": "train"}
    with pytest.raises(ValueError) as e:
        build_torchtune_dataset(text_completion_dataset, None, args)
    said = str(e.value)
    assert said.startswith(f"dataset ({books}) could not be loaded: datasets cannot write its cache "), said
    assert f"HF_DATASETS_CACHE='{cache / 'datasets'}'" in said and f"Not a directory: '{home / '.cache'}'" in said
    assert said.endswith(("set HF_DATASETS_CACHE" if given else "set HF_HOME (or HF_DATASETS_CACHE)")
                         + " to a folder you can write"), said
    assert home.read_text() == ""
