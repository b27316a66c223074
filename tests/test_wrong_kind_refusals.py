"""A whole file of another kind given as text (a zip archive, an Arrow file) is told its own fix alone: before, the
refusal ended "mend the record, or skip such records with dataset.skip_bad_records=True", and skipping drops the
whole file, every member zipfile reads in it and every row pyarrow reads in it (as for a Parquet file under another
name: tests/test_geoparquet_records.py). The references: zipfile's and pyarrow.ipc's own reads of the file."""

from __future__ import annotations

import json
import zipfile

import pytest

from torchtune_longshort.data import corpus

TEXTS = ["book one " * 6, "book two " * 6]


def _zip(path):
    with zipfile.ZipFile(path, "w") as z:
        for i, text in enumerate(TEXTS):
            z.writestr(f"{i}.txt", text)
    with zipfile.ZipFile(path) as z:
        return [z.read(n).decode() for n in z.namelist()]


def _arrow(path):
    pa = pytest.importorskip("pyarrow")
    table = pa.table({"text": TEXTS})
    with pa.OSFile(str(path), "wb") as f, pa.ipc.new_file(f, table.schema) as writer:
        writer.write_table(table)
    with pa.memory_map(str(path)) as f:
        return pa.ipc.open_file(f).read_all().column("text").to_pylist()


@pytest.mark.parametrize("kind, fix", [(_zip, "a zip archive, not text: extract its files and name them"),
                                       (_arrow, "an Arrow file, not text: load its folder as a Hugging Face data set")])
def test_a_whole_file_of_another_kind_is_not_told_to_skip_it(tmp_path, kind, fix):
    (tmp_path / "books").mkdir()
    wrong = tmp_path / "books" / "a.txt"
    assert kind(wrong) == TEXTS  # the file holds the texts, which its own reader reads
    (tmp_path / "books" / "b.txt").write_text("another book")
    skipped = [d for d in corpus.local_text(str(wrong.parent), skip_bad_records=True)() if d]
    assert skipped == ["another book"]  # skipping drops the whole file, not a record of it
    with pytest.raises(ValueError) as err:
        corpus.local_text(str(wrong.parent))
    said = str(err.value)
    assert said == f"{wrong}: {fix}", said


def test_a_compressed_file_on_a_command_line_is_told_to_decompress_it_alone(tmp_path):
    # longshort-misalignment --data books/: it ended "...: mend the record, or skip such records with
    # --skip-bad-records", and skipping drops the whole file, whose text gzip's own read gives
    import gzip

    from torchtune_longshort.data.source_names import SourceNames, source_names

    (tmp_path / "books").mkdir()
    packed = tmp_path / "books" / "a.txt"
    packed.write_bytes(gzip.compress(TEXTS[0].encode(), mtime=0))
    assert gzip.decompress(packed.read_bytes()).decode() == TEXTS[0]
    (tmp_path / "books" / "b.txt").write_text("another book")
    with source_names(SourceNames("--data", {"path": "--data", "skip_bad_records": "--skip-bad-records"})):
        assert [d for d in corpus.local_text(str(packed.parent), skip_bad_records=True)() if d] == ["another book"]
        with pytest.raises(ValueError) as err:
            corpus.local_text(str(packed.parent))
    said = str(err.value)
    assert said.startswith(f"{packed}: a gzip-compressed file, not text: decompress it first (") and said.endswith(
        " files)"), said


@pytest.mark.parametrize("saved", ["/out/step_3", None])
@pytest.mark.parametrize("b", ["b.txt", "b.jsonl"])
def test_a_file_compressed_under_a_running_source_is_told_to_decompress_it_alone(tmp_path, saved, b):
    # a local source read whole at build, whose b.txt a gzip copy replaces mid-run: the stop said "mend the record
    # (or skip it: dataset.skip_bad_records=True)", and skipping drops the whole file (gzip's own read gives the text);
    # a b.jsonl said "b.jsonl:1: bytes that are not utf-8 (...)" and to skip it, its lines read one by one
    import gzip

    from torchtune_longshort.data.text_files import DataRecordError, SkippedRecord
    from torchtune_longshort.training.bad_record import record_stop

    stops = None
    held = TEXTS[1] if b == "b.txt" else "".join(json.dumps({"text": t}) + "\n" for t in TEXTS)
    for skip in (False, True):
        (tmp_path / "a.txt").write_text(TEXTS[0])
        (tmp_path / b).write_text(held)
        docs = corpus.local_text(str(tmp_path), skip_bad_records=skip)
        (tmp_path / b).write_bytes(gzip.compress(held.encode()))
        assert gzip.decompress((tmp_path / b).read_bytes()).decode() == held
        if skip:  # the file goes whole: none of its texts is read
            read = [d if isinstance(d, str) else type(d) for d in docs()]
            assert read[0] == TEXTS[0] and set(read[1:]) == {SkippedRecord}, read
        else:
            with pytest.raises(DataRecordError) as stops:
                list(docs())
    said = str(record_stop(stops.value, saved, tmp_path))
    assert f"{tmp_path / b}: a gzip-compressed file, not text: decompress it first" in said, said
    assert "skip_bad_records" not in said and "fix the file as said" in said, said


def test_a_jsonl_of_many_torn_lines_asks_its_kind_once_and_a_compressed_copy_again(tmp_path, monkeypatch):
    # each torn line of a .jsonl read with skipping on re-read the file's first 64 KiB (one read per bad line) to
    # tell a copy compressed mid-run; asked once per version of the file, a gzip copy (its mtime kept) still told
    import gzip
    import os

    from torchtune_longshort.data import text_files
    from torchtune_longshort.data.file_kinds import not_text

    asked = []  # the first bytes read to ask the file's kind
    monkeypatch.setattr(text_files, "not_text", lambda head, enc="utf-8": asked.append(head) or not_text(head, enc))

    f = tmp_path / "torn.jsonl"
    f.write_text("".join(f'{{"text": "torn {i}\n' for i in range(40)) + json.dumps({"text": TEXTS[0]}) + "\n")
    said = []
    assert list(text_files.iter_documents([f], on_bad_record=said.append)) == [TEXTS[0]]
    assert len(said) == 40 and all(": not a JSON line (" in s for s in said) and len(asked) == 1, (said[:2], asked)
    stat = f.stat()
    f.write_bytes(gzip.compress(f.read_bytes()))
    os.utime(f, ns=(stat.st_atime_ns, stat.st_mtime_ns))  # as gzip keeps it
    said.clear()
    assert list(text_files.iter_documents([f], on_bad_record=said.append)) == []
    assert said and all("a gzip-compressed file, not text: decompress it first" in s for s in said), said[:2]
    assert len(asked) == 2, len(asked)  # the new version asked once
    # a file gone since its bad line was read (a source changed under the run): the line's own fault, no traceback
    gone = tmp_path / "gone.jsonl"
    assert text_files._unparsed(gone, f"{gone}:1: not a JSON line", "utf-8") == f"{gone}:1: not a JSON line"


@pytest.mark.parametrize("saved", ["/out/step_3", None])
def test_a_stop_keeps_its_kind_and_says_only_the_way_on_that_helps(saved):
    """A source out of reach stays a DataSourceError (wait for it, then go on), and a record ``datasets``' parser
    stops at is told skipping cannot reach it (it was told to skip it, which does nothing)."""
    from torchtune_longshort.data.text_files import DataRecordError, DataSourceError
    from torchtune_longshort.training.bad_record import record_stop

    gone = record_stop(DataSourceError("hub: reading stopped"), saved, "/out")
    assert type(gone) is DataSourceError and "once the source can be read again" in str(gone), str(gone)
    torn = DataRecordError("a.jsonl:3: not a JSON line")
    torn.skippable = False
    said = str(record_stop(torn, saved, "/out"))
    assert "(datasets' parser stops at it: dataset.skip_bad_records cannot skip it)" in said, said
