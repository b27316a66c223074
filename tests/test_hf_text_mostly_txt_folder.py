"""``hf_text(<folder>)`` over a folder of ``*.txt`` files with one ``.jsonl`` beside them: ``datasets`` infers its
text builder (the most common suffix), which this package read one record a line (only a folder of ``*.txt`` alone was
read whole: 'hello', 'world' came as two documents). The references: ``datasets``' own builder for the folder, and
each text file's contents read whole."""

from __future__ import annotations

import json

import pytest
from datasets import load_dataset_builder

from torchtune_longshort.data.corpus import hf_text
from torchtune_longshort.data.dual_window import PackedTokenStream


def _folder(tmp_path):
    folder = tmp_path / "books"
    folder.mkdir()
    (folder / "a.txt").write_text("hello\nworld\n")
    (folder / "b.txt").write_text("second book\nits last line\n")
    (folder / "notes.jsonl").write_text(json.dumps({"text": "a note"}) + "\n")
    return folder


def test_a_folder_datasets_reads_with_its_text_builder_gives_one_document_a_file(tmp_path):
    folder = _folder(tmp_path)
    assert type(load_dataset_builder(str(folder))).__module__.endswith(".text")  # datasets' own choice
    whole = sorted(f.read_text() for f in folder.glob("*.txt"))
    assert sorted(hf_text(str(folder))()) == whole


def test_a_run_that_read_it_by_lines_is_refused_naming_the_change(tmp_path):
    folder = _folder(tmp_path)
    stream = PackedTokenStream(hf_text(str(folder)), tokenize=lambda t: [1] + [ord(c) for c in t] + [2])
    stream.take(3)
    lines = sum(len(f.read_text().splitlines()) for f in folder.glob("*.txt"))  # the documents read by lines
    state = {**stream.state_dict(), "reading": 3, "documents": lines}
    with pytest.raises(ValueError, match=r"cannot resume: this run was saved by an earlier torchtune_longshort, which "
                                         r"read text files one record a line"):
        PackedTokenStream(hf_text(str(folder)), tokenize=lambda t: [1]).load_state_dict(state)
