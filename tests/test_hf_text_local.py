"""``corpus.hf_text`` / ``pg19`` on local data as a user names it: a JSON-lines file that ``datasets``' parser cannot
read, a folder written by ``datasets``' ``save_to_disk``, a first record without its text. Offline, with the real
``datasets``."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.data import corpus
from torchtune_longshort.data.text_files import DataRecordError

GOOD = [f"book {i} " * 4 for i in range(6)]


def _mixed_jsonl(path):
    """The user walk's file: line 4 a record without 'text' (skippable), line 6 a torn JSON line and line 7 bytes
    that are not UTF-8 (no parser reads them), the other lines good."""
    lines = [json.dumps({"text": t}).encode() for t in GOOD[:3]] + [b'{"content": "no text field"}']
    lines += [json.dumps({"text": GOOD[3]}).encode(), b'{"text": "torn', b'{"text": "\xff\xfe not utf-8"}']
    lines += [json.dumps({"text": t}).encode() for t in GOOD[4:]]
    path.write_bytes(b"\n".join(lines) + b"\n")
    return path


@pytest.mark.parametrize("skip", [False, True])
def test_a_file_the_parser_cannot_read_names_that_record_not_a_skippable_one(tmp_path, skip):
    """It named line 4 (a missing field, which skip_bad_records skips) although lines 6-7 were what stopped
    ``datasets``: the parse failure is named first, with the reader that can skip it."""
    f = _mixed_jsonl(tmp_path / "bad.jsonl")
    with pytest.raises(DataRecordError) as caught:
        list(corpus.hf_text("json", data_files=str(f), skip_bad_records=skip)())
    said = str(caught.value)
    assert said.startswith(f"dataset: {f}:6: not a JSON line"), said
    assert "corpus.local_text" in said and "skip_bad_records" in said, said
    assert caught.value.skippable is False
    # the way on it names works: local_text reads the file and skips lines 4, 6 and 7 (the reference: the good lines)
    docs = [d for d in corpus.local_text(str(f), skip_bad_records=True)() if isinstance(d, str)]
    assert docs == GOOD
