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


@pytest.fixture
def hub_books(tmp_path, monkeypatch):
    """The hub played by a stand-in ``load_dataset``: ``org/books`` (name ``en``) streams a Parquet file, the format
    the hub serves, through ``datasets``' own parquet builder, cut off (``ConnectionError``) after ``cut`` rows
    (``rows``: how many the last stream served)."""
    datasets = pytest.importorskip("datasets")
    f = tmp_path / "train-00000-of-00001.parquet"
    pq.write_table(pa.Table.from_pylist(_rows()), f)
    real, served = datasets.load_dataset, {"cut": None, "rows": 0}

    def load_dataset(path, name=None, split=None, **kwargs):
        if path != "org/books":
            return real(path, name, split=split, **kwargs)

        def stream():
            served["rows"] = 0  # of this stream (the start's check opens one of its own)
            for i, row in enumerate(real("parquet", data_files=str(f), split=split, streaming=True)):
                if i == served["cut"]:
                    raise ConnectionError("Server Disconnected")
                served["rows"] += 1
                yield row
        return stream()

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    return f, served


def test_hf_text_names_a_hub_record_as_datasets_indexes_the_split_its_config_and_split_said(hub_books):
    """A hub stream's bad record was ``dataset 'org/books' split 'train' record 2``: which config, and counted how?
    Now ``(name 'en', split 'train') row 2``, the row ``datasets`` itself indexes there (``ds[2]``), as a local
    Parquet file's rows are named (the reference: the non-streamed split's row, read by ``datasets``)."""
    import datasets

    from torchtune_longshort.data import corpus

    f, _ = hub_books
    with pytest.raises(ValueError) as err:
        list(corpus.hf_text("org/books", name="en", text_field="text")())
    assert "dataset 'org/books' (name 'en', split 'train') row " in str(err.value), err.value
    assert datasets.load_dataset("parquet", data_files=str(f), split="train")[_named(str(err.value))]["text"] is None


def test_hf_text_names_a_source_cut_off_mid_run_by_the_records_it_read(hub_books):
    """``reading stopped after record 2`` after three records were read (counted from 0, read as two): now the count
    of records the stream yielded (the reference: the stand-in hub's own count of rows it served)."""
    from torchtune_longshort.data import corpus
    from torchtune_longshort.data.text_files import DataSourceError

    _, served = hub_books
    served["cut"] = BAD
    with pytest.raises(DataSourceError) as err:
        list(corpus.hf_text("org/books", name="en", text_field="input")())
    found = re.search(r"\(name 'en', split 'train'\): reading stopped after its first (\d+) records? ", str(err.value))
    assert found and int(found.group(1)) == served["rows"] == BAD, err.value
    from torchtune_longshort.data.source_names import SourceNames, source_names

    # an evaluation's source is led by the user's key for it, as its torn line: it started "data set 'org/books'"
    with source_names(SourceNames("data set", key="ppl_dataset_path in --metadata")):
        with pytest.raises(DataSourceError, match="^ppl_dataset_path in --metadata: data set 'org/books' "
                                                  r"\(name 'en', split 'train'\): reading stopped after "):
            list(corpus.hf_text("org/books", name="en", text_field="input")())


def test_hf_text_names_a_local_json_line_as_the_text_reader_does(tmp_path):
    """``hf_text("json", data_files=...)`` named a bad JSON line ``record 2`` (datasets skips the blank line); the
    text reader names it ``<file>:4``. The reference: the 1-based line of the file that holds the null text."""
    from torchtune_longshort.data import corpus

    f = tmp_path / "d.jsonl"
    lines = [json.dumps(_rows()[0]), "", json.dumps(_rows()[1]), json.dumps(_rows()[BAD])]
    f.write_text("\n".join(lines) + "\n")
    line = next(n for n, raw in enumerate(lines, 1) if raw and json.loads(raw)["text"] is None)
    with pytest.raises(ValueError) as err:
        list(corpus.hf_text("json", data_files=str(f))())
    with pytest.raises(ValueError) as read:
        list(iter_documents([f]))
    assert f"{f}:{line}: " in str(err.value) and str(read.value).startswith(f"{f}:{line}: "), (err.value, read.value)
