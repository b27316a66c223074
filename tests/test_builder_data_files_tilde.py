"""``source: json`` without ``data_dir`` and ``data_files: "~/x.jsonl"``: ``datasets`` reads ``<cwd>/~/x.jsonl``
(its ``resolve_pattern`` does not expand ``~``), while the config check expanded it to ``$HOME/x.jsonl``, passed, and
the load then failed "could not be loaded: FileNotFoundError: Unable to find '<cwd>/~/x.jsonl'". Each case is
compared with ``datasets``' own builder for the same arguments."""

from __future__ import annotations

import os

import pytest

from torchtune_longshort.data.data_files import named_files


@pytest.fixture
def home(tmp_path, monkeypatch):
    """``$HOME/x.jsonl``; the current directory an unrelated ``tmp/cwd``."""
    (tmp_path / "home").mkdir()
    (tmp_path / "home" / "x.jsonl").write_text('{"text": "home"}\n')
    (tmp_path / "cwd").mkdir()
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path / "cwd")
    return tmp_path


def datasets_reads(data_files):
    from datasets import load_dataset_builder

    return list(load_dataset_builder("json", data_files=data_files).config.data_files["train"])


def test_a_tilde_entry_is_read_where_datasets_reads_it(home):
    (home / "cwd" / "~").mkdir()
    (home / "cwd" / "~" / "x.jsonl").write_text('{"text": "cwd"}\n')
    expected = datasets_reads("~/x.jsonl")
    assert [os.fspath(f) for _, f in named_files({"source": "json", "data_files": "~/x.jsonl"}, "dataset")] == expected


def test_a_tilde_entry_datasets_cannot_find_is_refused_naming_both_paths(home):
    with pytest.raises(FileNotFoundError):
        datasets_reads("~/x.jsonl")
    with pytest.raises(FileNotFoundError, match=r"^dataset.data_files='~/x.jsonl' does not exist: datasets does not "
                                                r"expand ~ in data_files \(it reads '.*/cwd/~/x.jsonl', not "
                                                r"'.*/home/x.jsonl'\)"):
        named_files({"source": "json", "data_files": ["~/x.jsonl"]}, "dataset")
