"""A relative ``data_files`` under a local folder ``source`` names files inside that folder, as ``datasets`` reads
it (``load_dataset("books", data_files="*.txt")``): ``hf_text`` and the config check resolved it from the current
directory, and refused "dataset.data_files='a.txt' does not exist (no such file, folder or glob match)" for a folder
``datasets`` loads. Each case is compared with ``datasets``' own builder config for the same arguments."""

from __future__ import annotations

import os
import re

import pytest

from torchtune_longshort.data.corpus import hf_text
from torchtune_longshort.data.data_files import named_files


@pytest.fixture
def books(tmp_path, monkeypatch):
    """``tmp/books/{a,b}.txt`` and ``notes.md``, the current directory an unrelated ``tmp/elsewhere``."""
    (tmp_path / "books").mkdir()
    (tmp_path / "books" / "a.txt").write_text("first book\n")
    (tmp_path / "books" / "b.txt").write_text("second book\n")
    (tmp_path / "books" / "notes.md").write_text("not a book\n")
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    return tmp_path / "books"


def datasets_reads(source, data_files):
    """The files ``datasets`` resolves for ``load_dataset(source, data_files=...)``, its train split."""
    from datasets import load_dataset_builder

    return list(load_dataset_builder(source, data_files=data_files).config.data_files["train"])


@pytest.mark.parametrize("data_files", [["a.txt"], "*.txt", {"train": "b.txt"}])
def test_relative_data_files_are_read_inside_the_source_folder(books, data_files):
    expected = datasets_reads(str(books), data_files)
    args = {"source": str(books), "data_files": data_files, "split": "train"}
    assert [os.fspath(f) for _, f in named_files(args, "dataset")] == expected
    docs = list(hf_text(str(books), data_files=data_files, streaming=False)())
    assert docs == [open(f).read() for f in expected]


def test_a_relative_source_folder_is_read_from_the_current_directory(books, monkeypatch):
    monkeypatch.chdir(books.parent)
    expected = datasets_reads("books", "*.txt")
    assert [os.fspath(f) for _, f in named_files({"source": "books", "data_files": "*.txt"}, "dataset")] == expected


def test_a_relative_name_that_matches_nothing_in_the_folder_is_refused_naming_the_field_and_the_folder(books):
    with pytest.raises(FileNotFoundError) as datasets_error:  # datasets refuses it too, at the load
        datasets_reads(str(books), "nope.txt")
    assert os.fspath(books / "nope.txt") in str(datasets_error.value)
    for args in ({"source": str(books), "data_files": "nope.txt"}, {"source": str(books), "data_files": "*.json"}):
        with pytest.raises(FileNotFoundError) as e:
            named_files(args, "dataset")
        message = str(e.value)
        assert "\n" not in message and message.startswith(f"dataset.data_files={args['data_files']!r} does not exist")
        assert repr(os.fspath(books)) in message and "dataset.source" in message
    with pytest.raises(FileNotFoundError, match=re.escape(f"{os.fspath(books)!r}")):
        hf_text(str(books), data_files="nope.txt")


def test_a_path_from_the_current_directory_is_refused_saying_where_datasets_looks(books, monkeypatch):
    """``books/a.txt`` from the folder above ``books``: it passed the check, and ``datasets`` then looked for
    ``books/books/a.txt``."""
    monkeypatch.chdir(books.parent)
    with pytest.raises(FileNotFoundError):
        datasets_reads(str(books), "books/a.txt")
    with pytest.raises(FileNotFoundError, match=f"{re.escape(repr(os.getcwd()))} holds it, but datasets reads"):
        named_files({"source": str(books), "data_files": "books/a.txt"}, "dataset")


def test_a_builder_source_reads_relative_data_files_from_the_current_directory(books, monkeypatch):
    monkeypatch.chdir(books)
    expected = datasets_reads("text", "a.txt")
    assert [os.fspath(f.resolve()) for _, f in named_files({"source": "text", "data_files": "a.txt"}, "dataset")] \
        == expected


def test_data_files_under_a_folder_source_name_those_files_alone(books):
    """An empty ``.json`` beside the named ``*.txt``: datasets reads the ``*.txt`` alone, and the config check
    refused "dataset.source: .../empty.json holds no records" (the folder's files were listed after data_files)."""
    from torchtune_longshort.data.data_files import check_not_empty

    (books / "empty.json").write_text("")
    args = {"source": str(books), "data_files": "*.txt"}
    assert [os.fspath(f) for _, f in named_files(args, "dataset")] == datasets_reads(str(books), "*.txt")
    check_not_empty(named_files(args, "dataset"))


def test_a_data_dir_under_a_folder_source_is_read_inside_the_folder(books):
    """``data_dir: sub`` is ``books/sub`` to datasets; it was looked for in the current directory."""
    from datasets import load_dataset_builder

    (books / "sub").mkdir()
    (books / "sub" / "c.txt").write_text("third book\n")
    expected = list(load_dataset_builder(str(books), data_dir="sub").config.data_files["train"])
    files = named_files({"source": str(books), "data_dir": "sub"}, "dataset")
    assert [os.fspath(f.resolve()) for _, f in files] == expected and {k for k, _ in files} == {"dataset.data_dir"}
    expected = list(load_dataset_builder(str(books), data_dir="sub", data_files="*.txt").config.data_files["train"])
    files = named_files({"source": str(books), "data_dir": "sub", "data_files": "*.txt"}, "dataset")
    assert [os.fspath(f) for _, f in files] == expected


def test_a_builder_sources_relative_data_files_are_read_inside_its_data_dir(books, monkeypatch):
    """``source: text, data_dir: books, data_files: a.txt`` is ``books/a.txt`` to datasets (its packaged-module
    factory resolves the patterns in ``data_dir``): the check read ``./a.txt`` and refused "dataset.data_files='a.txt'
    does not exist"; with an ``a.txt`` (or an empty one) in the current directory it checked that file instead."""
    from datasets import load_dataset_builder

    monkeypatch.chdir(books.parent)
    data_dir = "books"
    expected = list(load_dataset_builder("text", data_dir=data_dir, data_files="a.txt").config.data_files["train"])
    args = {"source": "text", "data_dir": data_dir, "data_files": "a.txt"}
    assert [os.fspath(f) for _, f in named_files(args, "dataset")] == expected
    assert list(hf_text("text", data_dir=data_dir, data_files="a.txt", streaming=False)()) == \
        [open(f).read() for f in expected]
    with pytest.raises(FileNotFoundError, match=r"^dataset.data_files='nope.txt' does not exist in the folder of "
                                                r"dataset.data_dir"):
        named_files({**args, "data_files": "nope.txt"}, "dataset")


def test_a_tilde_in_data_files_under_a_folder_source_is_read_as_datasets_reads_it(books, tmp_path, monkeypatch):
    """``data_files: "~/x.txt"`` is ``<folder>/~/x.txt`` to datasets (``~`` is not expanded in a relative pattern):
    the check expanded it, passed ``$HOME/x.txt``, and the load then failed in datasets' words."""
    home = tmp_path / "home"
    home.mkdir()
    (home / "x.txt").write_text("in the home folder\n")
    monkeypatch.setenv("HOME", str(home))
    with pytest.raises(FileNotFoundError) as datasets_error:
        datasets_reads(str(books), "~/x.txt")
    assert os.fspath(books / "~" / "x.txt") in str(datasets_error.value)
    with pytest.raises(FileNotFoundError, match=r"^dataset.data_files='~/x.txt' does not exist in the folder of "
                                                r"dataset.source, .*datasets does not expand ~ \(that would be"):
        named_files({"source": str(books), "data_files": "~/x.txt"}, "dataset")
    (books / "~").mkdir()  # a folder named ~ inside the source: what datasets reads
    (books / "~" / "x.txt").write_text("in the folder named ~\n")
    expected = datasets_reads(str(books), "~/x.txt")
    assert [os.fspath(f) for _, f in named_files({"source": str(books), "data_files": "~/x.txt"}, "dataset")] == \
        expected == [os.fspath(books / "~" / "x.txt")]
