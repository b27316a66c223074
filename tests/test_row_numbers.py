"""A bad row of a JSON array or a Parquet file is named by one number whatever reader meets it: the text reader
(local_text, the evaluation's local data), the torchtune builders' record locator and BABILong's hub-layout loader
once gave the same row as ``row 1``, ``record 1`` and ``row 2``."""

import json
import re

import pytest

from torchtune_longshort.data.data_files import locate_record
from torchtune_longshort.data.text_files import iter_documents
from torchtune_longshort.eval.tasks.babilong import task as bl

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

BAD = 2  # the bad row's index among the file's rows


def _rows():
    rows = [{"text": f"doc {i}", "input": f"story {i}", "question": "Where is Mary?", "target": "kitchen"}
            for i in range(4)]
    rows[BAD] = {**rows[BAD], "text": None, "target": None}
    return rows


def _named(message: str) -> int:
    found = re.search(r" row (\d+)\b", message)
    assert found, message
    return int(found.group(1))


def _is_bad_in_file(f, n: int) -> bool:
    """The row ``n`` names, read by the file's own library the way Python indexes rows (independent of the readers)."""
    row = json.loads(f.read_text())[n] if f.suffix == ".json" else pq.read_table(f).slice(n, 1).to_pylist()[0]
    return row["text"] is None


@pytest.mark.parametrize("suffix", [".json", ".parquet"])
def test_the_text_reader_and_the_record_locator_name_the_same_row(tmp_path, suffix):
    f = tmp_path / f"d{suffix}"
    if suffix == ".json":
        f.write_text(json.dumps(_rows()))
    else:
        pq.write_table(pa.Table.from_pylist(_rows()), f)
    with pytest.raises(ValueError) as err:
        list(iter_documents([f]))
    read = _named(str(err.value))
    located = _named(locate_record([("dataset.data_files", f)], BAD))
    assert str(f) in locate_record([("dataset.data_files", f)], BAD)
    assert read == located and _is_bad_in_file(f, read)


def test_babilong_names_a_bad_parquet_row_as_the_text_reader_does(tmp_path):
    f = tmp_path / "0k" / "qa1-00000-of-00001.parquet"
    f.parent.mkdir()
    pq.write_table(pa.Table.from_pylist(_rows()), f)
    with pytest.raises(ValueError) as err:
        bl.load_babilong("qa1", "0k", str(tmp_path), babilong_missing="error")
    with pytest.raises(ValueError) as read:
        list(iter_documents([f]))
    assert _named(str(err.value)) == _named(str(read.value)) and _is_bad_in_file(f, _named(str(err.value)))


def test_the_record_locator_names_a_line_of_a_json_file_that_holds_json_lines(tmp_path):
    """``datasets``' own ``to_json`` writes JSON lines into a ``*.json`` file: the locator once fell back to ``record
    2`` with no file named; the reference is the 1-based line that holds the bad row, read back from the file."""
    datasets = pytest.importorskip("datasets")
    f = tmp_path / "d.json"
    datasets.Dataset.from_list(_rows()).to_json(str(f))
    lines = f.read_text().splitlines()
    assert len(lines) == len(_rows())  # JSON lines, not one array
    line = next(n for n, raw in enumerate(lines, 1) if json.loads(raw)["text"] is None)
    assert locate_record([("dataset.data_files", f)], BAD) == f"{f}:{line}"


def test_babilong_names_a_bad_json_line_as_the_text_reader_does(tmp_path):
    """BABILong's JSON-lines reader said ``<file> line 4``; the text reader says ``<file>:4``. The reference line: the
    1-based number of the torn line in the file, a blank line before it (counted, as an editor counts it)."""
    f = tmp_path / "0k" / "qa1.jsonl"
    f.parent.mkdir()
    lines = [json.dumps(_rows()[0]), json.dumps(_rows()[1]), "", '{"text": "torn']
    f.write_text("\n".join(lines) + "\n")
    line = lines.index('{"text": "torn') + 1
    with pytest.raises(ValueError) as babilong:
        bl.load_babilong("qa1", "0k", str(tmp_path), babilong_missing="error")
    with pytest.raises(ValueError) as read:
        list(iter_documents([f]))
    assert str(babilong.value).startswith(f"{f}:{line}: not a JSON line")
    assert str(read.value).startswith(f"{f}:{line}: not a JSON line")


def test_the_record_locator_reads_a_json_array_behind_a_byte_order_mark_as_the_text_reader_does(tmp_path):
    """An editor's UTF-8 byte-order mark before a JSON array: the text reader drops it and names ``<file> row 2``; the
    locator parsed the mark, failed and fell back to ``record 2`` with no file named. The reference: the row Python's
    own ``utf-8-sig`` codec reads back as the bad one."""
    f = tmp_path / "d.json"
    f.write_text(json.dumps(_rows()), encoding="utf-8-sig")
    assert f.read_bytes().startswith(b"\xef\xbb\xbf")
    with pytest.raises(ValueError) as err:
        list(iter_documents([f]))
    located = locate_record([("dataset.data_files", f)], BAD)
    assert located.startswith(f"{f} row "), located
    assert _named(located) == _named(str(err.value))
    assert json.loads(f.read_text(encoding="utf-8-sig"))[_named(located)]["text"] is None
