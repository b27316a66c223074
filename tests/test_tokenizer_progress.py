"""The tiny configs' tokenizer (training.bootstrap.stdlib_sentencepiece_tokenizer) says when it trains, on what and
where, and how long it took, in the recipe's log; a folder already trained is said to be reused, once."""

import logging
import os
import shutil
import sysconfig
from pathlib import Path

import pytest

from torchtune_longshort.training.bootstrap import stdlib_sentencepiece_tokenizer


def _lines(caplog):
    return [r.getMessage() for r in caplog.records if r.getMessage().startswith("Tokenizer:")]


def _first_stdlib_files(n):
    """The reference: the stdlib's *.py files outside the test packages, sorted by path, walked here with os.walk."""
    root = Path(sysconfig.get_paths()["stdlib"])
    found = []
    for d, dirs, files in os.walk(root):
        rel = Path(d).relative_to(root).parts
        if rel and (rel[0] in ("site-packages", "dist-packages", "test", "idlelib", "lib2to3")):
            dirs[:] = []
            continue
        found += [(Path(d, f).relative_to(root).parts, Path(d, f)) for f in files if f.endswith(".py")]
    return [p for _, p in sorted(found)][:n]


def test_training_and_reuse_are_said(tmp_path, caplog):
    caplog.set_level(logging.INFO)
    folder = tmp_path / "tok"
    stdlib_sentencepiece_tokenizer(str(folder), vocab_size=512, train_files_limit=3)
    start, done = _lines(caplog)
    kib = sum(p.stat().st_size for p in _first_stdlib_files(3)) / 1024  # the first 3: under 1 MiB
    assert f"training a SentencePiece BPE of 512 pieces on 3 standard-library files ({kib:.0f} KiB" in start
    assert str(folder) in start
    assert done.startswith("Tokenizer: trained in ") and done.endswith(f" s: {folder / 'tokenizer.model'}")
    stdlib_sentencepiece_tokenizer(str(folder), vocab_size=512, train_files_limit=3)  # this process's own: silent
    assert len(_lines(caplog)) == 2

    caplog.clear()
    cached = tmp_path / "cached"
    shutil.copytree(folder, cached)  # a folder trained by an earlier run
    for _ in range(2):  # the config check and the recipe both read it: said once
        stdlib_sentencepiece_tokenizer(str(cached), vocab_size=512, train_files_limit=3)
    assert _lines(caplog) == [f"Tokenizer: reusing {cached / 'tokenizer.model'}, already there (not trained again; "
                              "its vocab_size is its own: remove the folder to train it anew)"]


@pytest.mark.parametrize("named", ["notes.txt", "tok"], ids=["users_file", "folder_with_a_bad_tokenizer_model"])
def test_a_tokenizer_it_cannot_read_is_refused_with_no_reuse_line_before(tmp_path, caplog, named):
    """A user's file that is no SentencePiece model (or a folder whose tokenizer.model is none): the refusal comes
    alone; 'reusing ... remove the folder to train it anew' was said first (the file's: its user's folder)."""
    caplog.set_level(logging.INFO)
    (tmp_path / "tok").mkdir()
    (tmp_path / "notes.txt").write_text("my notes\n")
    (tmp_path / "tok" / "tokenizer.model").write_text("no model\n")
    with pytest.raises(RuntimeError, match="ModelProto"):  # the reference: sentencepiece's own refusal of the file
        stdlib_sentencepiece_tokenizer(str(tmp_path / named), vocab_size=512, train_files_limit=3)
    assert _lines(caplog) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "tok"]
