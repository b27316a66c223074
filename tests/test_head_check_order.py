"""The config check of a local_text file's first 64 KiB names the first bad record in file order, as the reader
does: it named an undecodable byte on line 11 while line 1 was no JSON, so a user mended line 11 and met line 1."""

import json

import pytest

from torchtune_longshort.data.text_files import DataRecordError, check_heads, iter_documents


def _first_bad_line(data: bytes, field: str) -> int:
    """1-based number of the first line that is no UTF-8 JSON object with a string ``field`` (blank lines pass)."""
    for n, raw in enumerate(data.split(b"\n"), 1):
        try:
            line = raw.decode("utf-8")
            if line.strip() and not isinstance(json.loads(line).get(field), str):
                return n
        except (UnicodeDecodeError, ValueError):
            return n
    raise AssertionError("no bad line")


@pytest.mark.parametrize("first", [b"this is not json", b'{"body": "no text field"}', b'{"text": "good"}'])
def test_the_head_check_names_the_first_bad_line_in_file_order(tmp_path, first):
    good = [b'{"text": "document %d"}' % i for i in range(2, 11)]
    data = b"\n".join([first, *good, b'{"text": "bad \xff byte"}', b'{"text": "after"}', b""])
    f = tmp_path / "c.jsonl"
    f.write_bytes(data)
    with pytest.raises(DataRecordError) as checked:
        check_heads([f], text_field="text", setting="dataset.text_field")
    with pytest.raises(DataRecordError) as read:
        list(iter_documents([f], "text", "dataset.text_field"))
    assert str(checked.value).startswith(f"{f}:{_first_bad_line(data, 'text')}: "), str(checked.value)
    assert str(checked.value) == str(read.value)
