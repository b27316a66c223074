"""``data_files: d`` where ``d`` is a folder: the config check read the folder's files and passed, while ``datasets``
matches data_files entries to files only, and the load then failed "Unable to find '<cwd>/d'". Each case is compared
with ``datasets``' own ``resolve_pattern``; the glob the refusal names is one it reads."""

from __future__ import annotations

import os
import re

import pytest

from torchtune_longshort.data.data_files import named_files


@pytest.fixture
def folder(tmp_path, monkeypatch):
    (tmp_path / "d").mkdir()
    (tmp_path / "d" / "a.txt").write_text("one document\n")
    (tmp_path / "d" / "b.txt").write_text("another\n")
    monkeypatch.chdir(tmp_path)
    return tmp_path / "d"


@pytest.mark.parametrize("absolute", [False, True])
def test_a_folder_entry_is_refused_as_datasets_refuses_it_naming_the_glob_it_reads(folder, absolute):
    from datasets.data_files import resolve_pattern

    entry = str(folder) if absolute else "d"
    with pytest.raises(FileNotFoundError, match="Unable to find"):
        resolve_pattern(entry, os.getcwd())
    with pytest.raises(FileNotFoundError) as refused:
        named_files({"source": "text", "data_files": [entry]}, "dataset")
    said = str(refused.value)
    assert said.startswith(f"dataset.data_files={entry!r} is a folder") and "dataset.source" in said
    glob = os.path.join(entry, "*.txt")
    assert repr(glob) in said
    got = [os.path.abspath(f) for _, f in named_files({"source": "text", "data_files": glob}, "dataset")]
    assert got == [os.path.abspath(f) for f in resolve_pattern(glob, os.getcwd())]


def test_a_folder_whose_files_lie_below_it_is_named_by_a_glob_datasets_reads_them_by(tmp_path, monkeypatch):
    """The suggested ``d/*.txt`` matched nothing when d's files lie in subfolders (``d/2024/a.txt``): the refusal
    names ``d/**/*.txt`` there, the most common suffix's (datasets' own resolve_pattern reads the files by it)."""
    from datasets.data_files import resolve_pattern

    for name in ("2024/a.txt", "2024/b.txt", "2025/c.txt", "2025/notes.csv"):
        (tmp_path / "d" / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / "d" / name).write_text("text\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError) as refused:
        named_files({"source": "text", "data_files": "d"}, "dataset")
    glob = os.path.join("d", "**", "*.txt")
    assert repr(glob) in str(refused.value), str(refused.value)
    assert sorted(os.path.relpath(f, "d") for f in resolve_pattern(glob, os.getcwd())) == [
        "2024/a.txt", "2024/b.txt", "2025/c.txt"]


@pytest.mark.parametrize("args", [{"source": "corpus"}, {"source": "text", "data_dir": "corpus"},
                                  {"source": ".", "data_dir": "corpus"}])
def test_a_folder_entry_inside_the_folder_it_is_read_in_is_refused_as_a_folder(tmp_path, monkeypatch, args):
    """Inside a local folder ``source`` or a builder's ``data_dir`` a relative entry is read there; one naming a
    folder was said not to exist ("no such file or glob match") though it does. datasets refuses it as a folder."""
    from datasets.data_files import resolve_pattern

    sub = tmp_path / "corpus" / "sub"
    sub.mkdir(parents=True)
    (sub / "a.txt").write_text("one document\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError, match="Unable to find"):
        resolve_pattern("sub", str(tmp_path / "corpus"))
    with pytest.raises(FileNotFoundError) as refused:
        named_files({**args, "data_files": "sub"}, "dataset")
    said = str(refused.value)
    assert said.startswith("dataset.data_files='sub' is a folder") and repr(str(sub)) in said, said
    _followed_loads(args, said, sub)
    glob = os.path.join("sub", "*.txt")
    assert repr(glob) in said
    got = [os.path.abspath(f) for _, f in named_files({**args, "data_files": glob}, "dataset")]
    assert got == [os.path.abspath(f) for f in resolve_pattern(glob, str(tmp_path / "corpus"))]


def _followed_loads(args, said, sub):
    """The refusal's "or the folder ... as <key> (without <keys>)", done as it says, is a dataset datasets' own
    load_dataset_builder reads the folder's file from (naming the folder as dataset.source beside a builder's
    data_dir, datasets read <folder>/<data_dir>: "doesn't contain any data files")."""
    from datasets import load_dataset_builder

    key, without = re.search(r"as dataset\.(\w+) \(without ([^)]*)\)$", said).groups()
    done = {k: v for k, v in args.items() if k not in re.split(r", | or | and ", without)}
    done[key] = str(sub)
    builder = load_dataset_builder(done["source"], data_dir=done.get("data_dir"))
    assert [os.path.abspath(f) for f in builder.config.data_files["train"]] == [str(sub / "a.txt")]


def test_the_glob_counts_files_only_not_subfolders_named_like_data_files(tmp_path, monkeypatch):
    """Subfolders named ``a.csv/``, ``b.csv/`` beside one file ``c.txt``: the glob names the files' suffix,
    ``d/*.txt``; ``d/*.csv`` matches only the folders, which datasets' resolve_pattern does not read."""
    from datasets.data_files import resolve_pattern

    for sub in ("a.csv", "b.csv"):
        (tmp_path / "d" / sub).mkdir(parents=True)
    (tmp_path / "d" / "c.txt").write_text("one document\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(FileNotFoundError):
        resolve_pattern(os.path.join("d", "*.csv"), os.getcwd())  # folders are no data files to datasets
    with pytest.raises(FileNotFoundError) as refused:
        named_files({"source": "text", "data_files": "d"}, "dataset")
    assert repr(os.path.join("d", "*.txt")) in str(refused.value), str(refused.value)
