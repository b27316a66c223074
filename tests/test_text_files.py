"""The one local-text reader (data/text_files.py): which files a path, glob, folder or list names, the documents
of each format, and bad records named by file and line (raised, or reported and skipped)."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.data.text_files import iter_documents, resolve_files


def test_entries_resolve_to_sorted_files(tmp_path):
    (tmp_path / "d" / "sub").mkdir(parents=True)
    for name in ("d/b.txt", "d/sub/a.txt", "d/c.md", "e.txt"):
        (tmp_path / name).write_text(name)
    assert resolve_files(tmp_path / "d", [".txt"], "x") == [tmp_path / "d/b.txt", tmp_path / "d/sub/a.txt"]
    assert resolve_files(str(tmp_path / "d" / "*.md"), [".txt"], "x") == [tmp_path / "d/c.md"]
    assert resolve_files([tmp_path / "e.txt", tmp_path / "d" / "c.md"], [], "x") == [tmp_path / "e.txt",
                                                                                    tmp_path / "d/c.md"]
    with pytest.raises(FileNotFoundError, match=r"x='.*nope\*' does not exist"):
        resolve_files([tmp_path / "e.txt", str(tmp_path / "nope*")], [".txt"], "x")
    with pytest.raises(FileNotFoundError, match=r"x='.*d' holds no files ending in \['.rst'\]"):
        resolve_files(tmp_path / "d", [".rst"], "x")


def test_formats_give_documents_in_file_order(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"whole\r\nfile \xff")
    (tmp_path / "b.jsonl").write_text('{"text": "one"}\n\n{"text": "two", "n": 1}\n')
    (tmp_path / "c.json").write_text(json.dumps([{"body": "three"}, {"body": ""}]))
    (tmp_path / "d.json").write_text(json.dumps({"body": "four"}))
    files = [tmp_path / n for n in ("a.txt", "b.jsonl")]
    assert list(iter_documents(files, encoding_errors="replace")) == ["whole\r\nfile \ufffd", "one", "two"]
    assert list(iter_documents([tmp_path / "c.json", tmp_path / "d.json"], "body")) == ["three", "", "four"]


@pytest.mark.parametrize("name,data,message,good", [
    ("a.jsonl", b'{"text": "ok"}\n\n{"text": \n', "a.jsonl:3: not a JSON line", ["ok"]),
    ("a.jsonl", b'{"text": "ok"}\n{"text": "\xff"}\n',
     "a.jsonl:2: bytes that are not utf-8 (invalid start byte at byte 10)", ["ok"]),
    ("a.jsonl", b'{"text": 3}\n', "a.jsonl:1: field 'text' holds int '3', expected a string", []),
    ("a.jsonl", b'["text"]\n', "a.jsonl:1: record is a list", []),
    ("a.json", b'[{"text": "ok"},\n {"body": "x"}]', "a.json row 1: no text field 'text' in the record; its fields are "
                                                     "['body']. Set opt.field to one of them", ["ok"]),
    ("a.json", b'[{"text": "ok"},\n oops]', "a.json:2: not JSON", []),
    ("a.json", b'[{"text": "\xff"}]', "a.json: bytes that are not utf-8", []),
    ("a.txt", b"ok \xff", "a.txt: bytes that are not utf-8 (invalid start byte at byte 3)", []),
])
def test_bad_records_are_named_and_can_be_skipped(tmp_path, name, data, message, good):
    (tmp_path / name).write_bytes(data)
    (tmp_path / "z.txt").write_text("after")
    files = [tmp_path / name, tmp_path / "z.txt"]
    with pytest.raises(ValueError) as err:  # JSON is decoded strictly whatever encoding_errors says
        list(iter_documents(files, setting="opt.field", encoding_errors="strict" if name == "a.txt" else "replace"))
    assert message in str(err.value)
    bad = []
    assert list(iter_documents(files, setting="opt.field", on_bad_record=bad.append)) == good + ["after"]
    assert len(bad) == 1 and message in bad[0]
