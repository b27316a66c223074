"""data/text_files.py's edges: hand mutants that test_text_files, test_hf_text_local and test_data_records let through.
A skipping source with no readable record among its first FIRST_READABLE_WITHIN is refused naming its first bad
record, having read no more of it. References: the records the source gave (counted here), the messages written
here."""

from __future__ import annotations

import pytest

from torchtune_longshort.data.text_files import (
    FIRST_READABLE_WITHIN, DataRecordError, SkippedRecord, check_first_readable,
)


def test_a_source_of_skipped_records_is_refused_after_the_first_thousand_naming_the_first():
    drawn = []

    def documents():  # bad records past the limit, then one that reads
        for i in range(FIRST_READABLE_WITHIN + 500):
            drawn.append(i)
            yield SkippedRecord(f"c.jsonl:{i + 1}: not a JSON line")
        yield "a document"

    with pytest.raises(DataRecordError) as e:
        check_first_readable(documents(), "dataset.source='c.jsonl'")
    assert len(drawn) == FIRST_READABLE_WITHIN
    assert str(e.value) == (f"dataset.source='c.jsonl': none of its first {FIRST_READABLE_WITHIN} records can be read "
                            "(skip_bad_records=True skips a bad record, not a source of them); the first: c.jsonl:1: "
                            "not a JSON line")
    check_first_readable(iter([SkippedRecord("c.jsonl:1: not a JSON line"), "a document"]), "x")  # one that reads


def test_the_config_checks_head_names_a_bad_byte_as_the_reader_does(tmp_path):
    # check_heads (before a run) said the line before it, and the byte's offset in the file, not in its line
    from torchtune_longshort.data.text_files import check_heads, iter_documents

    lines = [b'{"text": "one"}\n', b'{"text": "two"}\n', b'{"text": "caf\xe9 three"}\n']
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"".join(lines))
    with pytest.raises(UnicodeDecodeError) as own:  # the reference: Python's decode of that line alone
        lines[2].decode("utf-8")
    with pytest.raises(DataRecordError) as head:
        check_heads([path])
    with pytest.raises(DataRecordError) as reader:
        list(iter_documents([path]))
    assert str(head.value) == str(reader.value) == (
        f"{path}:3: bytes that are not utf-8 ({own.value.reason} at byte {own.value.start})")


def test_a_json_lines_file_that_starts_with_a_byte_order_mark_is_read(tmp_path):
    import json

    from torchtune_longshort.data.text_files import iter_documents

    path = tmp_path / "c.jsonl"
    path.write_bytes(b'\xef\xbb\xbf{"text": "a"}\n{"text": "b"}\n')
    reference = [json.loads(line)["text"] for line in path.read_text(encoding="utf-8-sig").splitlines()]
    assert list(iter_documents([path])) == reference == ["a", "b"]


def test_each_json_line_is_read_again_at_its_location(tmp_path):
    from torchtune_longshort.data.text_files import iter_documents, iter_located, read_located

    path = tmp_path / "c.jsonl"
    path.write_text('{"text": "one"}\n\n{"text": "two"}\n{"text": "three"}\n')
    files = [path]
    located = list(iter_located(files))
    assert [doc for _, doc in located] == list(iter_documents(files)) == ["one", "two", "three"]
    assert [next(read_located(files, where)) for where, _ in located] == ["one", "two", "three"]


def test_two_json_arrays_in_one_file_are_said_to_be_no_json(tmp_path):
    # only a *.json file of objects one a line is read as JSON lines (datasets' to_json): two arrays are no JSON
    import json

    from torchtune_longshort.data.text_files import iter_documents

    text = '[{"text": "a"}]\n[{"text": "b"}]\n'
    (tmp_path / "c.json").write_text(text)
    with pytest.raises(json.JSONDecodeError) as own:
        json.loads(text)
    with pytest.raises(DataRecordError) as e:
        list(iter_documents([tmp_path / "c.json"]))
    assert str(e.value) == f"{tmp_path / 'c.json'}:{own.value.lineno}: not JSON ({own.value.msg})"


@pytest.mark.parametrize("encoding", [5, None])
def test_an_encoding_that_is_no_name_is_refused_in_one_line(encoding):
    # encoding: 5 in a YAML config: codecs.lookup's TypeError came as a traceback
    import codecs

    from torchtune_longshort.data.text_files import check_encoding

    with pytest.raises(TypeError):
        codecs.lookup(encoding)
    with pytest.raises(ValueError, match=rf"^dataset.encoding={encoding!r} is not a text encoding Python knows"):
        check_encoding(encoding, "dataset.encoding")
