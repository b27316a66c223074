"""The data's records before step 1: a bad record named with its file and line, skipped and counted when asked,
an empty corpus refused."""

from __future__ import annotations

import re

import pytest


def _jsonl(tmp_path, lines, name="c.jsonl"):
    p = tmp_path / "corpus"
    p.mkdir(exist_ok=True)
    (p / name).write_bytes(b"".join(lines))
    return p


GOOD = b'{"text": "' + b"def f(x):\\n    return x + 1\\n" * 200 + b'"}\n'


@pytest.mark.parametrize("bad,match", [
    (b'{"text": "ok"\n', r"c.jsonl:2: not a JSON line"),
    (b'{"text": "\xff\xfe broken"}\n', r"c.jsonl:2: bytes that are not utf-8"),
    (b'{"body": "no text field"}\n', r"c.jsonl:2: .*'text'"),
])
def test_bad_records_are_named_with_file_and_line_before_anything(tmp_path, bad, match):
    from torchtune_longshort.data.corpus import local_text

    with pytest.raises(ValueError, match=match):
        local_text(str(_jsonl(tmp_path, [GOOD, bad, GOOD])))


def test_bad_records_can_be_skipped_and_counted(tmp_path, caplog):
    from torchtune_longshort.data.corpus import local_text

    path = _jsonl(tmp_path, [GOOD, b"not json\n", b'{"text": "\xff"}\n', GOOD])
    from torchtune_longshort.data.text_files import SkippedRecord

    docs = list(local_text(str(path), skip_bad_records=True)())
    assert "skipped 2 unreadable record(s)" in caplog.text
    # as the stream reads them: each skipped record in its place, named, with no tokens
    assert [type(d).__name__ for d in docs] == ["str", "SkippedRecord", "SkippedRecord", "str"]
    assert re.search(r"c.jsonl:2: not a JSON line", docs[1].message) and list(docs[1]) == []
    assert re.search(r"c.jsonl:3: bytes that are not utf-8", docs[2].message) and isinstance(docs[2], SkippedRecord)


def test_empty_corpus_is_refused(tmp_path):
    from torchtune_longshort.data.corpus import local_text

    (tmp_path / "d").mkdir()
    for i in range(3):
        (tmp_path / "d" / f"{i}.txt").write_text("")
    with pytest.raises(ValueError, match="yields no non-empty documents"):
        local_text(str(tmp_path / "d"))
