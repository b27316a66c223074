"""A BABILong data file without rows is refused with the fix (before: '<dir>/0k/qa1.jsonl has no rows' alone), matched
whole, on one line."""

from __future__ import annotations

import json
import re

import pytest

from torchtune_longshort.eval.tasks.babilong import task as bl


def test_a_babilong_file_without_rows_names_the_fix(tmp_path):
    (tmp_path / "0k").mkdir()
    (tmp_path / "0k" / "qa1.jsonl").write_text("")
    with pytest.raises(ValueError) as info:
        bl.load_babilong("qa1", "0k", str(tmp_path), babilong_missing="error")
    assert re.fullmatch(r".*/0k/qa1\.jsonl has no rows: write them \(python -m "
                        r"torchtune_longshort\.eval\.tasks\.babilong\.generator\), or name a babilong_data_dir that "
                        r"holds them", str(info.value)), str(info.value)


def test_a_babilong_line_that_is_not_utf8_is_named_and_the_length_left_unscored(tmp_path):
    """One byte that is no UTF-8 in a row (Mary w\\xffent) ended the whole run: 'longshort-eval: error: 'utf-8' codec
    can't decode byte 0xff in position 106', exit 2, no file named. Now that length counts as missing, its file and
    line named; the reference: Python's strict decode of each line (only the second fails)."""
    (tmp_path / "0k").mkdir()
    good = json.dumps({"input": "Mary went to the kitchen.", "question": "Where is Mary?", "target": "kitchen"})
    lines = [good.encode(), good.encode().replace(b"Mary went", b"Mary w\xffent"), good.encode()]
    assert [i for i, line in enumerate(lines) if not _decodes(line)] == [1]
    (tmp_path / "0k" / "qa1.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    match = r".*/0k/qa1\.jsonl:2: not UTF-8 \(invalid start byte\); BABILong files are UTF-8 text, .*"
    with pytest.raises(ValueError, match=match):
        bl.load_babilong("qa1", "0k", str(tmp_path), babilong_missing="error")
    ds = bl.load_babilong("qa1", "0k,1k", str(tmp_path))["qa1"]  # 1k: no file, its own reason
    reasons = sorted(bl.reason_of(row) for row in ds)
    assert len(reasons) == 2 and re.fullmatch(r"longshort_babilong_qa1: length 0k: " + match, reasons[0]), reasons
    assert "1k" in reasons[1] and "not found" in reasons[1]


def _decodes(raw: bytes) -> bool:
    try:
        raw.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False
