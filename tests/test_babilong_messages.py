"""A BABILong data file without rows is refused with the fix (before: '<dir>/0k/qa1.jsonl has no rows' alone), matched
whole, on one line."""

from __future__ import annotations

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
