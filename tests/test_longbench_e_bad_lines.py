"""LongBench-E's local loader names a bad line where it is: hand mutants of longbench_e/task.py that
test_longbench_e_loader let through (its column was matched as any number). The column of a byte that is no UTF-8,
the line of a bad line after a blank one or in a file that starts with a byte-order mark, and a line that is JSON but
no object. References: the lines written here (Python's own decode and json.loads of each)."""

from __future__ import annotations

import json

import pytest

from torchtune_longshort.eval.tasks.longbench_e import task as lb

ROW = {"input": "Q?", "context": "Paris is the capital", "answers": ["a"], "length": 12, "all_classes": None,
       "_id": "1"}


def _refusal(folder, lines) -> str:
    (folder / "trec_e.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    with pytest.raises(ValueError) as e:
        lb.load_longbench_e("trec_e", str(folder), longbench_e_missing="error")
    return str(e.value)


def test_a_byte_that_is_no_utf8_is_named_at_its_column(tmp_path):
    lines = [json.dumps(ROW).encode() for _ in range(3)]
    lines[1] = lines[1].replace(b"Paris", b"Par\xffis")
    with pytest.raises(UnicodeDecodeError) as own:
        lines[1].decode("utf-8")
    said = _refusal(tmp_path, lines)
    assert f"data {tmp_path / 'trec_e.jsonl'}:2: not UTF-8 ({own.value.reason}: byte b'\\xff' at column " \
        f"{own.value.start + 1})" in said, said


@pytest.mark.parametrize("first", [b"", b"\xef\xbb\xbf"], ids=["plain", "bom"])
def test_a_bad_line_is_named_past_a_blank_line_and_a_byte_order_mark(tmp_path, first):
    lines = [first + json.dumps(ROW).encode(), b"", b"  ", b"not json"]
    bad = next(n for n, line in enumerate(lines, 1) if line.strip() and not _is_json(line))
    assert bad == 4
    said = _refusal(tmp_path, lines)
    assert f"data {tmp_path / 'trec_e.jsonl'}:{bad}: not a JSON line" in said, said


def test_a_line_that_is_json_but_no_object_is_named(tmp_path):
    lines = [json.dumps(ROW).encode(), json.dumps(["Paris", 3]).encode()]
    kind = type(json.loads(lines[1])).__name__
    said = _refusal(tmp_path, lines)
    assert f"data {tmp_path / 'trec_e.jsonl'}:2: a JSON {kind}, not an object" in said, said


def _is_json(line: bytes) -> bool:
    try:
        json.loads(line.decode("utf-8-sig"))
        return True
    except ValueError:
        return False


def test_a_sample_without_context_and_input_is_counted_once(tmp_path):
    rows = [ROW, {**ROW, "context": None, "input": None}]
    bad = sum(1 for r in rows if not all(isinstance(r[k], str) for k in ("context", "input")))
    (tmp_path / "qasper_e.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(ValueError) as e:
        lb.load_longbench_e("qasper_e", str(tmp_path), longbench_e_missing="error")
    assert f"qasper_e.jsonl:2: field 'context' is missing or null ({bad} of {len(rows)} samples)" in str(e.value)


@pytest.mark.parametrize("field", ["answers", "length"])
def test_a_sample_missing_answers_or_length_is_named_by_its_line(tmp_path, field):
    """A sample without ``answers`` or ``length`` was named ``<file>, sample 3`` (its index among the rows
    ``datasets`` read, blank lines left out), where a missing context names ``<file>:<line>``; its line now."""
    rows = [{**ROW, "_id": str(i)} for i in range(5)]
    del rows[3][field]
    lines = [json.dumps(r).encode() for r in rows]
    lines.insert(1, b"")
    bad = next(n for n, line in enumerate(lines, 1) if line.strip() and field not in json.loads(line))
    said = _refusal(tmp_path, lines)
    assert f"trec_e.jsonl:{bad}: " in said and ", sample " not in said, said
