"""The one local-text reader (data/text_files.py): which files a path, glob, folder or list names, the documents
of each format, and bad records named by file and line (raised, or reported and skipped)."""

from __future__ import annotations

import gzip
import json
import re

import pytest

from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.data.file_kinds import record_suffixes
from torchtune_longshort.data.text_files import check_heads, iter_documents


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
    # a folder's hidden files are left out, as datasets leaves them: a Jupyter checkpoint copy was a second document
    (tmp_path / "d" / ".ipynb_checkpoints").mkdir()
    for name in (".ipynb_checkpoints/b-checkpoint.txt", ".hidden.txt"):
        (tmp_path / "d" / name).write_text(name)
    assert resolve_files(tmp_path / "d", [".txt"], "x") == [tmp_path / "d/b.txt", tmp_path / "d/sub/a.txt"]
    assert resolve_files(tmp_path / "d" / ".hidden.txt", [], "x") == [tmp_path / "d/.hidden.txt"]  # named: read


def test_formats_give_documents_in_file_order(tmp_path):
    (tmp_path / "a.txt").write_bytes(b"whole\r\nfile \xff")
    (tmp_path / "b.jsonl").write_text('{"text": "one"}\n\n{"text": "two", "n": 1}\n')
    (tmp_path / "c.json").write_text(json.dumps([{"body": "three"}, {"body": ""}]))
    (tmp_path / "d.json").write_text(json.dumps({"body": "four"}))
    files = [tmp_path / n for n in ("a.txt", "b.jsonl")]
    assert list(iter_documents(files, encoding_errors="replace")) == ["whole\nfile \ufffd", "one", "two"]
    assert list(iter_documents([tmp_path / "c.json", tmp_path / "d.json"], "body")) == ["three", "", "four"]
    # a *.json file of JSON lines (datasets' Dataset.to_json writes them; its json loader reads them) was refused as
    # "not JSON (Extra data)"; the reference: the same lines in a *.jsonl file
    lines = '{"text": "one"}\r\n\n{"text": "a\u2028b"}\n{"text": "three"}\n'
    (tmp_path / "e.json").write_text(lines, encoding="utf-8", newline="")
    (tmp_path / "e.jsonl").write_text(lines, encoding="utf-8", newline="")
    assert list(iter_documents([tmp_path / "e.json"])) == list(iter_documents([tmp_path / "e.jsonl"])) == [
        "one", "a\u2028b", "three"]
    (tmp_path / "e.json").write_text('{"text": "one"}\n{"body": "x"}\n{"text": "three"}\n')
    bad = []
    assert list(iter_documents([tmp_path / "e.json"], on_bad_record=bad.append)) == ["one", "three"]
    assert bad == [f"{tmp_path / 'e.json'}:2: no text field 'text' in the record; its fields are ['body']. Set "
                   "text_field to one of them"]


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


@pytest.mark.parametrize("name,data,what", [
    ("a.txt.gz", gzip.compress(b"some text", mtime=0), "a gzip-compressed file, not text: decompress it first"),
    ("a.txt", b"PAR1\x15\x04\x15\x10" + b"\x00" * 40, "a Parquet file, not text: name it *.parquet"),
    ("a.txt", "utf-16 text".encode("utf-16"), "UTF-16 text (its byte-order mark), not UTF-8"),
    ("a.bin", b"\x7fELF\x02\x01\x01\x00\x00\x00", "binary (NUL bytes), not text"),
], ids=["gzip", "parquet", "utf16", "binary"])  # fixed ids: every xdist worker collects the same names
def test_a_file_that_is_no_text_is_named_not_read_as_replacement_characters(tmp_path, name, data, what):
    # the evaluation's local data decodes with replacement: a .parquet or .gz file was scored as a document of
    # U+FFFD characters, and the run reported a perplexity
    (tmp_path / name).write_bytes(data)
    (tmp_path / "z.txt").write_text("after")
    files = [tmp_path / name, tmp_path / "z.txt"]
    with pytest.raises(ValueError, match=re.escape(f"{tmp_path / name}: {what}")):
        list(iter_documents(files, encoding_errors="replace"))
    with pytest.raises(ValueError, match=re.escape(what)):  # the training config's check, before the run
        check_heads(files)
    bad = []
    assert list(iter_documents(files, on_bad_record=bad.append)) == ["after"] and what in bad[0]


def test_a_utf16_file_is_read_when_its_encoding_is_named(tmp_path):
    (tmp_path / "a.txt").write_bytes("zwei\x00 Wörter".encode("utf-16"))  # a NUL of its own text, no binary
    assert list(iter_documents([tmp_path / "a.txt"], encoding="utf-16")) == ["zwei\x00 Wörter"]
    check_heads([tmp_path / "a.txt"], encoding="utf-16")


def test_parquet_rows_are_records_as_the_same_rows_in_json_lines(tmp_path):
    pa, pq = pytest.importorskip("pyarrow"), pytest.importorskip("pyarrow.parquet")
    rows = [{"text": f"document {i}", "n": i} for i in range(600)]  # more than one batch of rows
    rows[301]["text"] = None
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "d.parquet", row_group_size=100)
    (tmp_path / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    from_parquet, from_jsonl = [], []
    got = list(iter_documents([tmp_path / "d.parquet"], on_bad_record=from_parquet.append))
    assert got == list(iter_documents([tmp_path / "d.jsonl"], on_bad_record=from_jsonl.append))
    assert len(got) == 599 and from_parquet == [f"{tmp_path / 'd.parquet'} row 301: field 'text' holds NoneType "
                                                "'None', expected a string"]
    with pytest.raises(ValueError, match=r"d.parquet: no column 'body'; its columns are \['text', 'n'\]\. Set "
                                         r"opt.field to one of them"):
        list(iter_documents([tmp_path / "d.parquet"], "body", "opt.field"))
    assert resolve_files(tmp_path, record_suffixes(), "x") == [tmp_path / "d.jsonl", tmp_path / "d.parquet"]


def test_a_text_file_reads_its_line_ends_as_python_and_datasets_read_them(tmp_path):
    """A .txt file with Windows (\\r\\n) or old Mac (\\r) line ends was one document with its '\\r's kept, so
    corpus.local_text trained on '\\r' tokens where hf_text('text') (datasets' text builder), the stdlib corpus
    (read_text) and Python's open() read '\\n'; the reference is Python's text mode, the reading of those two. A
    JSON record's text is its string, '\\r' and all."""
    from torchtune_longshort.data.corpus import local_text

    texts = {"crlf.txt": b"alpha\r\nbeta\r\n\r\ngamma", "cr.txt": b"alpha\rbeta\r", "lf.txt": b"alpha\nbeta\n"}
    for name, raw in texts.items():
        (tmp_path / name).write_bytes(raw)
    (tmp_path / "r.jsonl").write_text(json.dumps({"text": "a\r\nb"}) + "\r\n")
    files = [tmp_path / n for n in texts]
    assert list(iter_documents(files)) == [f.read_text() for f in files]
    assert list(local_text([str(f) for f in files])()) == [f.read_text() for f in files]
    assert list(iter_documents([tmp_path / "r.jsonl"])) == ["a\r\nb"]
