"""BABILong from a local snapshot of the hub's own files: ``RMT-team/babilong-1k-samples`` holds a folder per length
config with one Parquet file per task, ``<length>/<qa>-00000-of-00001.parquet`` (``128k``:
``-00000-of-00002`` and ``-00001-of-00002``), columns ``question``, ``target``, ``input``. The loader read only
``<dir>/<length>/<qa>.jsonl`` and called such a folder "not found". The reference: the same rows as JSONL."""

from __future__ import annotations

import json

import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

from torchtune_longshort.eval.tasks.babilong import task as bl  # noqa: E402


def _rows(qa, length, n):
    return [{"question": f"Where is Mary? ({qa} {length} {i})", "target": ["bathroom", "garden", "office"][i % 3],
             "input": f"Mary moved to the {['bathroom', 'garden', 'office'][i % 3]}. John went to the hallway. {i}"}
            for i in range(n)]


def _write_hub(folder, shards):
    """``shards``: {(length, file name): rows}, written as the hub does (pyarrow, the hub's column order)."""
    for (length, name), rows in shards.items():
        (folder / length).mkdir(parents=True, exist_ok=True)
        pq.write_table(pa.Table.from_pylist(rows), folder / length / name)


def _write_jsonl(folder, files):
    for (length, qa), rows in files.items():
        (folder / length).mkdir(parents=True, exist_ok=True)
        (folder / length / f"{qa}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_a_snapshot_of_the_hubs_parquet_files_gives_the_samples_of_the_same_rows_as_jsonl(tmp_path):
    zero, one = _rows("qa1", "0k", 3), _rows("qa1", "1k", 5)
    _write_hub(tmp_path / "hub", {("0k", "qa1-00000-of-00001.parquet"): zero,
                                  ("1k", "qa1-00000-of-00002.parquet"): one[:2],  # two shards, as the hub's 128k
                                  ("1k", "qa1-00001-of-00002.parquet"): one[2:],
                                  ("1k", "qa10-00000-of-00001.parquet"): _rows("qa10", "1k", 4)})  # not qa1's
    _write_jsonl(tmp_path / "jsonl", {("0k", "qa1"): zero, ("1k", "qa1"): one})
    got = bl.load_babilong("qa1", "0k,1k", str(tmp_path / "hub"), babilong_missing="error")["qa1"]
    ref = bl.load_babilong("qa1", "0k,1k", str(tmp_path / "jsonl"), babilong_missing="error")["qa1"]
    assert len(ref) == 8 and got.to_list() == ref.to_list()
    assert sorted(got["input"]) == sorted(r["input"] for r in zero + one)


def test_neither_layout_names_both_and_a_bad_parquet_row_is_named(tmp_path):
    (tmp_path / "0k").mkdir()
    with pytest.raises(FileNotFoundError) as err:
        bl.load_babilong("qa2", "0k", str(tmp_path), babilong_missing="error")
    said = str(err.value)
    assert f"neither {tmp_path / '0k' / 'qa2.jsonl'} nor {tmp_path / '0k' / 'qa2-*.parquet'}" in said, said
    assert "expected <dir>/<length>/<qa>.jsonl" in said and "<dir>/<length>/<qa>-00000-of-00001.parquet" in said
    ds = bl.load_babilong("qa2", "0k", str(tmp_path))["qa2"]
    assert len(ds) == 1 and "<length>/<qa>-00000-of-00001.parquet" in ds[0][bl.MISSING_DATA_FIELD]
    rows = _rows("qa2", "0k", 2)
    path = tmp_path / "0k" / "qa2-00000-of-00001.parquet"
    for table, match in ((pa.Table.from_pylist([rows[0], {**rows[1], "target": None}]),
                          r"qa2-00000-of-00001.parquet row 1: field\(s\) \['target'\] are not strings"),
                         (pa.Table.from_pylist([{"input": "x", "question": "q"}]),
                          r"row 0: field\(s\) \['target'\] missing"),
                         (pa.Table.from_pylist(rows).slice(0, 0), r"qa2-00000-of-00001.parquet has no rows")):
        pq.write_table(table, path)
        with pytest.raises(ValueError, match=match):
            bl.load_babilong("qa2", "0k", str(tmp_path), babilong_missing="error")
    path.write_bytes(b'{"input": "x"}\n')  # a JSON file named .parquet
    ds = bl.load_babilong("qa2", "0k", str(tmp_path))["qa2"]
    assert "qa2-00000-of-00001.parquet: not a Parquet file pyarrow reads" in ds[0][bl.MISSING_DATA_FIELD]
