"""``hf_text(<folder>)`` over books in ``*.txt`` with a ``notes.jsonl`` beside them: ``datasets`` reads the files of
the most common suffix alone, and the note was left out without a word. Now one warning names how many files it
leaves out and the first, and the way on. The reference: ``datasets``' own data files for the folder
(``load_dataset_builder(folder).config.data_files``)."""

from __future__ import annotations

import json
import logging
from pathlib import Path

from datasets import load_dataset_builder

from torchtune_longshort.data.corpus import hf_text


def _folder(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    for name in ("a.txt", "b.txt", "c.txt"):
        (folder / name).write_text(f"the book {name}\n")
    (folder / "notes.jsonl").write_text(json.dumps({"text": "a note"}) + "\n")
    (folder / "more.csv").write_text("text\nsome row\n")
    return folder


def test_the_folders_files_datasets_leaves_out_are_named_once(tmp_path, caplog):
    folder = _folder(tmp_path)
    read = {Path(f) for files in load_dataset_builder(str(folder)).config.data_files.values() for f in files}
    left = sorted(f for f in folder.iterdir() if f not in read)  # datasets' own choice of what it reads
    assert left  # the folder is one where datasets leaves files out
    with caplog.at_level(logging.WARNING):
        hf_text(str(folder))
    said = [r.getMessage() for r in caplog.records if "not read" in r.getMessage()]
    assert len(said) == 1, said
    assert f"dataset.source={str(folder)!r}: {len(left)} files in it are not read" in said[0]
    assert f"(first: {left[0]})" in said[0] and "name the files to read in dataset.data_files" in said[0]


def test_data_files_naming_what_to_read_says_nothing(tmp_path, caplog):
    folder = _folder(tmp_path)
    with caplog.at_level(logging.WARNING):
        hf_text(str(folder), data_files=[str(folder / "a.txt")])
    assert not [r for r in caplog.records if "not read" in r.getMessage()]
