"""A metrics.jsonl line that is not JSON (not the last, which a kill may tear) is refused with the fix (before:
'<run>/metrics.jsonl:1: not a JSON line (...)' alone, from a resume and from the study's reading of a run)."""

from __future__ import annotations

import re

import pytest

from torchtune_longshort.training.metrics import metric_lines


def test_a_bad_metrics_line_is_refused_with_the_fix(tmp_path):
    path = tmp_path / "metrics.jsonl"
    path.write_text('garbage {"step": 0}\n{"step": 1}\n{"step": 2}\n')
    with pytest.raises(ValueError) as info:
        metric_lines(path)
    assert re.fullmatch(r".*/metrics\.jsonl:1: not a JSON line \('garbage \{\"step\": 0\}'\): mend that line or "
                        r"delete it \(each line is one logged step's JSON\)", str(info.value)), str(info.value)


def test_a_line_with_a_byte_that_is_not_utf8_is_named_as_a_bad_line(tmp_path):
    """Before: "'utf-8' codec can't decode byte 0xff in position 0: invalid start byte", naming no file or line."""
    path = tmp_path / "metrics.jsonl"
    path.write_bytes(b'\xff{"step": 0}\n{"step": 1}\n')
    with pytest.raises(ValueError) as info:
        metric_lines(path)
    assert re.fullmatch(r".*/metrics\.jsonl:1: not a JSON line \('\ufffd\{\"step\": 0\}'\): mend that line or "
                        r"delete it \(each line is one logged step's JSON\)", str(info.value)), str(info.value)
