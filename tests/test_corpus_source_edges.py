"""Six hand mutants of data/corpus survived every test that reaches it (mutants16): a source refusing to start at
its own end (from_index(count): a resume saved after a pass's last document), piece_chars=True taken for 1, a
skip_bad_records corpus of nothing but bad records let through (a run on no text), a record gone bad since the check
named at another line, redpajama_book letting source=<the taken-down 1T repository> through with data_files, and
pg19 reading 'text' where text_field named another column. The references: the source's own documents sliced,
config.values.integer(1) (the config's rule for a count), json.loads of each line, the line numbers counted by
enumerate, and the JSON lines the test writes."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.config.values import integer
from torchtune_longshort.data.corpus import REDPAJAMA_1T, local_text, pg19, redpajama_book, stdlib
from torchtune_longshort.data.text_files import DataRecordError


def _jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_source_starts_anywhere_up_to_its_end(tmp_path):
    source = local_text(str(_jsonl(tmp_path / "a.jsonl", [{"text": f"record {i}"} for i in range(3)])))
    whole = list(source())
    for start in range(source.count + 1):
        assert list(source.from_index(start)) == whole[start:], start


def test_piece_chars_true_is_refused_as_the_configs_integer_refuses_it():
    with pytest.raises(ValueError, match="not accepted"):
        integer(1)("dataset.piece_chars", True)  # the reference: a bool is no count
    with pytest.raises(ValueError, match=r"piece_chars=True is not accepted"):
        stdlib(limit=2, shuffle_seed=0, piece_chars=True)


def test_a_corpus_of_nothing_but_skipped_records_is_refused(tmp_path):
    f = tmp_path / "bad.jsonl"
    f.write_text('{"text": "torn\n{"other": 1}\n')
    readable = []
    for line in f.read_text().splitlines():
        try:
            readable.append(isinstance(json.loads(line).get("text"), str))
        except json.JSONDecodeError:
            readable.append(False)
    assert not any(readable)
    with pytest.raises(ValueError, match="yields no non-empty documents"):
        local_text(str(f), skip_bad_records=True)


def test_a_record_gone_bad_since_the_check_is_named_at_its_own_line(tmp_path):
    rows = [{"text": f"record {i}"} for i in range(4)]
    f = _jsonl(tmp_path / "a.jsonl", rows)
    source = local_text(str(f))
    lines = f.read_text().splitlines(keepends=True)
    for i, line in enumerate(lines):  # each torn in turn, its length kept (the offsets the source keeps hold)
        torn = lines[:i] + [line.replace("}", " ")] + lines[i + 1:]
        f.write_text("".join(torn))
        with pytest.raises(DataRecordError, match=rf"a\.jsonl:{i + 1}: not a JSON line"):
            list(source.in_order([i]))
        f.write_text("".join(lines))


def test_redpajama_book_refuses_the_taken_down_repository_even_with_data_files(tmp_path):
    f = _jsonl(tmp_path / "b.jsonl", [{"text": "a book"}])
    with pytest.raises(ValueError, match="no longer serves its book subset"):
        redpajama_book(data_files=str(f), source=REDPAJAMA_1T)


def test_pg19_reads_the_column_text_field_names(tmp_path):
    rows = [{"text": "not this", "body": f"book {i}"} for i in range(2)]
    f = _jsonl(tmp_path / "pg.jsonl", rows)
    docs = list(pg19(source="json", data_files=str(f), text_field="body", streaming=False)())
    assert docs == [r["body"] for r in rows]
