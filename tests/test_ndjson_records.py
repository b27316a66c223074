"""Every reader of local files reads a suffix ``datasets`` maps to its ``json`` builder (``.ndjson``) as JSON lines, as
it reads ``.jsonl``: before, ``local_text`` read a named ``*.ndjson`` file whole (its JSON as one document) and left
it out of a folder, a bad record in it went unnamed, a whitespace-only one passed the empty-file check, and the
evaluation's ``data_files`` folder refused it. The references: ``datasets.load_dataset("json", ...)`` on the same
file, ``json.loads`` line by line, and ``datasets``' own suffix map."""

from __future__ import annotations

import json

import pytest
from datasets import load_dataset
from datasets.packaged_modules import _EXTENSION_TO_MODULE

from torchtune_longshort.data import corpus
from torchtune_longshort.data.data_files import check_not_empty, explain_load_failure, locate_record
from torchtune_longshort.data.file_kinds import json_lines_file, record_suffixes
from torchtune_longshort.data.resume_reading import earlier_clauses
from torchtune_longshort.data.text_files import DataRecordError
from torchtune_longshort.eval.tasks.common.local_files import read_local

TEXTS = [f"document {i} " * 5 for i in range(5)]


def _write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n")
    return path


def _records(path):
    return _write(path, [json.dumps({"id": i, "text": t}) for i, t in enumerate(TEXTS)])


def test_record_suffixes_are_datasets_json_builders_and_the_reader_asks_the_same_map():
    json_builder = {s for s, (builder, _) in _EXTENSION_TO_MODULE.items() if builder == "json"}
    assert ".ndjson" in json_builder
    parquet_builder = {s for s, (builder, _) in _EXTENSION_TO_MODULE.items() if builder == "parquet"}
    assert set(record_suffixes()) == json_builder | parquet_builder  # .geoparquet, .gpq: test_geoparquet_records
    for suffix in _EXTENSION_TO_MODULE:  # a JSON-lines file: the json builder's, but a .json file (array or lines)
        assert json_lines_file(f"a{suffix}") == (_EXTENSION_TO_MODULE[suffix][0] == "json" and suffix != ".json")


@pytest.mark.parametrize("named", ["file", "folder"])
def test_local_text_reads_an_ndjson_file_as_datasets_does(tmp_path, named):
    f = _records(tmp_path / "books" / "a.ndjson")
    expected = [r["text"] for r in load_dataset("json", data_files=str(f), split="train", streaming=True)]
    assert expected == TEXTS
    src = corpus.local_text(str(f if named == "file" else f.parent))
    assert list(src()) == expected


def test_a_bad_ndjson_line_is_named_by_its_line_as_in_a_jsonl_file(tmp_path):
    lines = [json.dumps({"text": t}) for t in TEXTS]
    lines[3] = '{"text": "torn'
    f = _write(tmp_path / "a.ndjson", lines)
    bad = next(i + 1 for i, line in enumerate(lines) if not _loads(line))  # the line json.loads refuses, from 1
    with pytest.raises(DataRecordError, match=rf"^{f}:{bad}: not a JSON line"):
        corpus.local_text(str(f))
    failure = explain_load_failure([("dataset.data_files", f)], "text", "dataset", ValueError("parser"))
    assert str(failure).startswith(f"dataset: {f}:{bad}: not a JSON line"), failure


def _loads(line):
    try:
        return json.loads(line) is not None
    except json.JSONDecodeError:
        return False


def test_a_whitespace_only_ndjson_file_is_refused_as_empty(tmp_path):
    f = tmp_path / "a.ndjson"
    f.write_text("  \n\n \t\n")
    assert not list(load_dataset("json", data_files=str(f), split="train", streaming=True))  # datasets: no record in it
    with pytest.raises(ValueError, match=rf"^dataset.data_files: {f} holds no records \(an empty file\)"):
        check_not_empty([("dataset.data_files", f)])


def test_a_record_index_maps_to_its_ndjson_line_past_blank_lines(tmp_path):
    lines = [json.dumps({"text": t}) for t in TEXTS]
    f = _write(tmp_path / "a.ndjson", [lines[0], "", lines[1], "  ", lines[2], lines[3], lines[4]])
    rows = [r["text"] for r in load_dataset("json", data_files=str(f), split="train", streaming=True)]
    raw = f.read_text().split("\n")
    for index, text in enumerate(rows):  # the line that holds datasets' row, counted from 1
        line = next(k + 1 for k, r in enumerate(raw) if r.strip() and json.loads(r)["text"] == text)
        assert locate_record([("dataset.data_files", f)], index) == f"{f}:{line}"


def test_the_evaluation_reads_a_folder_of_ndjson_files(tmp_path):
    f = _records(tmp_path / "eval" / "a.ndjson")
    expected = [r["text"] for r in load_dataset("json", data_files=str(f), split="train", streaming=True)]
    assert list(read_local(str(f.parent), "text", False, files_setting="ppl_data_files")) == expected


def test_a_run_saved_when_ndjson_files_were_read_whole_is_not_resumed_on_their_lines(tmp_path):
    ndjson, jsonl = _records(tmp_path / "n" / "a.ndjson"), _records(tmp_path / "j" / "a.jsonl")
    saved = {"reading": 5}  # a data state of the version before .ndjson was read by lines (mark 6)
    said = earlier_clauses(corpus.local_text(str(ndjson.parent)).earlier_reading, saved)
    assert f"read a .ndjson file named as such whole, one document, and left it out of a folder ({ndjson} here" in said
    assert earlier_clauses(corpus.local_text(str(jsonl.parent)).earlier_reading, saved) == ""
