"""``hf_text(source=<folder>)`` names a torn JSON line and an empty file as ``hf_text("json", data_files=...)`` names
them: before, the folder form gave datasets' bare "ArrowInvalid: JSON parse error: Invalid encoding in string. in
row 3" and "dataset '<folder>' split 'train' is empty". References: ``json.loads`` line by line (the first line it
refuses), and ``datasets.load_dataset`` on the same folder (its parser stops there; it finds no records at all)."""

from __future__ import annotations

import json

import pytest
from datasets import load_dataset

from torchtune_longshort.data import corpus
from torchtune_longshort.data.text_files import DataRecordError

LINES = ['{"text": "a a a"}', "", '{"text": "b b b"}', '{"text": "c c', '{"text": "d d d"}']


def _first_torn_line(path):
    for i, line in enumerate(path.read_text().splitlines(), 1):
        try:
            line.strip() and json.loads(line)
        except json.JSONDecodeError:
            return i
    return None


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson"])
def test_a_torn_line_in_a_folder_is_named_by_file_and_line(tmp_path, suffix):
    path = tmp_path / "books" / f"a{suffix}"
    path.parent.mkdir()
    path.write_text("\n".join(LINES) + "\n")
    line = _first_torn_line(path)
    assert line == 4
    with pytest.raises(Exception, match=r"in row 2"):  # datasets' own: its parser's row, blank lines not counted
        list(load_dataset(str(path.parent), split="train", streaming=True))
    with pytest.raises(DataRecordError) as folder:
        corpus.hf_text(str(path.parent))
    with pytest.raises(DataRecordError) as named:
        corpus.hf_text("json", data_files=str(path))
    assert str(folder.value).startswith(f"dataset: {path}:{line}: not a JSON line"), str(folder.value)
    assert str(folder.value) == str(named.value)


@pytest.mark.parametrize("suffix", [".jsonl", ".ndjson"])
def test_a_folder_of_a_whitespace_file_is_said_to_hold_no_records(tmp_path, suffix):
    path = tmp_path / "books" / f"a{suffix}"
    path.parent.mkdir()
    path.write_text("  \n\n \t\n")
    with pytest.raises(ValueError, match="corresponds to no data"):  # datasets' own: no record in the folder
        load_dataset(str(path.parent), split="train")
    with pytest.raises(ValueError) as folder:
        corpus.hf_text(str(path.parent))
    assert str(folder.value) == f"dataset.source: {path} holds no records (an empty file); name a file with data"
