"""``corpus.hf_text`` / ``pg19`` on local data as a user names it: a JSON-lines file that ``datasets``' parser cannot
read, a folder written by ``datasets``' ``save_to_disk``, a first record without its text. Offline, with the real
``datasets``."""

from __future__ import annotations

import json
import re

import pytest

from torchtune_longshort.data import corpus
from torchtune_longshort.data.source_names import SourceNames, source_names
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


def test_a_folder_written_by_save_to_disk_is_read(tmp_path, sp_tokenizer_dir):
    """``Dataset.save_to_disk``'s folder as ``source`` (training) and ``ppl_dataset_path`` (evaluation): it was
    refused with datasets' "Please use load_from_disk instead"; now its rows are the documents, as written."""
    import datasets

    rows = [f"saved document {i}: " + "word " * 40 for i in range(4)]
    datasets.Dataset.from_dict({"text": rows, "n": list(range(4))}).save_to_disk(str(tmp_path / "saved"))
    assert list(corpus.hf_text(str(tmp_path / "saved"))()) == rows
    assert list(corpus.pg19(str(tmp_path / "saved"), split="validation")()) == rows  # saved without a split
    # saved from one split: that split's rows; another split is refused naming the setting
    one = datasets.Dataset.from_dict({"text": rows[:2]}, split=datasets.Split.TRAIN)
    one.save_to_disk(str(tmp_path / "train_only"))
    assert list(corpus.hf_text(str(tmp_path / "train_only"), split="train")()) == rows[:2]
    with pytest.raises(ValueError, match=r"split 'validation' \(validation.dataset.split\) is not a split of .*"
                                         r"train_only': it holds split 'train' alone"):
        with source_names(SourceNames("validation.dataset")):
            corpus.hf_text(str(tmp_path / "train_only"), split="validation")
    # a saved DatasetDict: the split asked for
    datasets.DatasetDict({"train": one, "test": datasets.Dataset.from_dict({"text": rows[2:]})}).save_to_disk(
        str(tmp_path / "dict"))
    assert list(corpus.hf_text(str(tmp_path / "dict"), split="test")()) == rows[2:]
    # the same folders given to local_text: it read dataset_info.json as a record ("dataset_info.json row 0: no text
    # field 'text' ... its fields are ['citation', ...]"); refused naming the source that reads them (above)
    (tmp_path / "a.txt").write_text("a document")
    for path, key in ((str(tmp_path / "saved"), "path"),
                      ([str(tmp_path / "a.txt"), str(tmp_path / "dict")], "path[1]")):
        with pytest.raises(ValueError, match=rf"^dataset.{re.escape(key)}='.*' is a folder written by datasets' "
                                             r"save_to_disk .*: read it with dataset._component_=torchtune_longshort."
                                             r"data.corpus.hf_text and dataset.source="):
            corpus.local_text(path, skip_bad_records=True)
    pytest.importorskip("lm_eval")
    from torchtune_longshort.eval.tasks.ppl.task import long_ppl_dataset

    got = long_ppl_dataset(ppl_source="hf", ppl_dataset_path=str(tmp_path / "saved"), tokenizer=str(sp_tokenizer_dir),
                           ppl_max_seq_lengths=[16], ppl_num_samples=2)["test"].to_list()
    assert [r["error"] for r in got] == ["", ""] and all(r["n_tokens"] == 16 for r in got), got


@pytest.mark.parametrize("where", ["dataset", "validation.dataset"])
def test_a_bad_first_record_is_refused_with_the_way_to_skip_it(tmp_path, where):
    """A Parquet copy whose first row's text is null: refused at the start with "mend ... or skip", as local_text's
    and the mid-run messages say (the hint was missing); with skipping on, the next row is the first document."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    (tmp_path / "pg19").mkdir()
    pq.write_table(pa.Table.from_pylist([{"text": None}, {"text": GOOD[0]}]), tmp_path / "pg19" / "train.parquet")
    with source_names(SourceNames(where)), pytest.raises(DataRecordError) as caught:
        corpus.pg19(str(tmp_path / "pg19"))
    said = str(caught.value)
    # named in its file, as a named data_files' row is (the folder's files are datasets' own for the split)
    assert f"{tmp_path / 'pg19' / 'train.parquet'} row 0: field 'text' holds NoneType" in said, said
    assert said.endswith(f"mend the record, or skip such records with {where}.skip_bad_records=True"), said
    with source_names(SourceNames(where)):
        docs = list(corpus.pg19(str(tmp_path / "pg19"), skip_bad_records=True)())
    assert [type(d).__name__ for d in docs] == ["SkippedRecord", "str"] and docs[1] == GOOD[0]


def test_a_record_the_parser_stops_at_gets_no_skip_hint(tmp_path):
    f = tmp_path / "torn.jsonl"
    f.write_bytes(b'{"text": "torn\n')
    with pytest.raises(DataRecordError) as caught:
        corpus.hf_text("json", data_files=str(f))
    assert "skip such records with dataset.skip_bad_records" not in str(caught.value), caught.value


def test_text_files_are_read_whole_as_local_text_reads_them(tmp_path, monkeypatch):
    """A folder of ``.txt`` books as ``source`` (or ``source: text``): ``datasets``' text builder made each line a
    record, and the stream put BOS/EOS around every line (the newlines dropped, a blank line an empty document). Now
    one document a file; the reference: ``local_text`` over the same files. ``sample_by: line`` still gives lines.
    The folder's dataset module (``datasets`` lists and sorts every file for it) is asked once at build, not three
    times (the folder's split files, its builder, then ``load_dataset`` reading the first record)."""
    import datasets.load

    (tmp_path / "books").mkdir()
    for name, text in (("a.txt", "Chapter 1\n\nIt was a dark night.\nThe end.\n"), ("b.txt", "Second book\nline 2\n")):
        (tmp_path / "books" / name).write_text(text)
    whole = list(corpus.local_text(str(tmp_path / "books"))())
    asked, factory = [], datasets.load.dataset_module_factory
    monkeypatch.setattr(datasets.load, "dataset_module_factory", lambda *a, **k: asked.append(a) or factory(*a, **k))
    built = corpus.hf_text(str(tmp_path / "books"), check_first=False)
    assert asked == [(str(tmp_path / "books"),)]  # hf_text's one question; load_dataset asks its own when it reads
    assert list(built()) == whole and len(asked) == 2
    assert list(corpus.hf_text("text", data_files=str(tmp_path / "books" / "a.txt"))()) == whole[:1]
    lines = list(corpus.hf_text("text", data_files=str(tmp_path / "books" / "a.txt"), sample_by="line")())
    assert lines == ["Chapter 1", "It was a dark night.", "The end."]  # the blank line no document, as local_text's


def test_a_run_saved_when_text_files_were_read_by_line_is_not_resumed_on_whole_files(tmp_path):
    """A data position saved by a version that read ``.txt`` files one record a line counts lines: resumed on whole
    files it skipped that many files (22 lines read: 22 books skipped, without a word) or was refused as if the user
    had changed the data. Now refused naming the change; a state this version saved resumes."""
    from torchtune_longshort.data.dual_window import PackedTokenStream

    (tmp_path / "books").mkdir()
    for i in range(6):
        (tmp_path / "books" / f"b{i}.txt").write_text(f"book {i}\n" * 5)
    tok = lambda t: [1] + [ord(c) % 256 for c in t] + [2]  # noqa: E731
    stream = PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=tok)
    stream.take(60)
    state = stream.state_dict()
    again = PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=tok)
    again.load_state_dict(state)
    assert again.take(40) == stream.take(40)
    old = {k: v for k, v in state.items() if k != "reading"}  # as the earlier versions saved it
    with pytest.raises(ValueError, match=r"^cannot resume: this run was saved by an earlier torchtune_longshort, "
                                         r"which read text files one record a line .*document 2 of pass 0\) would "
                                         r"land on other text\. Finish this run with the version that started it"):
        PackedTokenStream(corpus.hf_text(str(tmp_path / "books")), tokenize=tok).load_state_dict(old)
    lines = PackedTokenStream(corpus.hf_text(str(tmp_path / "books"), sample_by="line"), tokenize=tok)
    lines.load_state_dict(old)  # read as they read it: resumed


@pytest.mark.parametrize("suffix", [".tsv", ".ndjson", ".geoparquet"])
def test_a_folder_of_a_suffix_datasets_maps_to_a_read_builder_loads_as_datasets_loads_it(tmp_path, suffix):
    """A folder of ``*.tsv`` (``*.ndjson``, ``*.geoparquet``) files, which ``datasets`` maps to its csv (json,
    parquet) builder, was refused before loading: "source=... holds no files ending in ['.jsonl', '.json', '.txt',
    '.csv', '.parquet', '.arrow']". The reference: ``datasets.load_dataset`` on the folder itself."""
    import datasets

    f = tmp_path / "books" / f"b{suffix}"
    f.parent.mkdir()
    if suffix == ".tsv":
        f.write_text("id\ttext\n" + "".join(f"{i}\t{t}\n" for i, t in enumerate(GOOD[:3])))
    elif suffix == ".ndjson":
        f.write_text("".join(json.dumps({"text": t}) + "\n" for t in GOOD[:3]))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist([{"text": t} for t in GOOD[:3]]), f)
    expected = datasets.load_dataset(str(f.parent), split="train")["text"]
    assert expected == GOOD[:3]
    assert list(corpus.hf_text(str(f.parent), streaming=False)()) == expected


@pytest.mark.parametrize("skip", [False, True])
def test_a_tsv_file_read_with_source_csv_is_refused_with_the_separator_to_add(tmp_path, skip):
    """``source: csv, data_files: b.tsv``: the csv builder splits on commas, so the record's one column was the
    header 'id\\ttext', said with no hint ("its fields are ['id\\ttext']"). The reference: datasets' own columns
    without ``sep``, and its rows with ``sep="\\t"`` (the hint's fix), which hf_text then reads."""
    import datasets

    f = tmp_path / "b.tsv"
    f.write_text("id\ttext\n" + "".join(f"{i}\t{t}\n" for i, t in enumerate(GOOD[:3])))
    cache = str(tmp_path / "cache")
    header = f.read_text().splitlines()[0]  # datasets' one column: the header line, tabs and all
    assert datasets.load_dataset("csv", data_files=str(f), split="train", cache_dir=cache).column_names == [header]
    said = f"{header!r} is a tab-separated header, read as one column (the csv builder splits on commas): add "
    said += "dataset.sep"
    with pytest.raises(DataRecordError, match=re.escape(said + ': "\\t"')):
        corpus.hf_text("csv", data_files=str(f), skip_bad_records=skip)
    expected = datasets.load_dataset("csv", data_files=str(f), split="train", sep="\t", cache_dir=cache)["text"]
    assert list(corpus.hf_text("csv", data_files=str(f), sep="\t")()) == expected == GOOD[:3]
