"""Every reader of local files reads a suffix ``datasets`` maps to its ``parquet`` builder (``.geoparquet``,
``.gpq``) by its rows, as it reads ``.parquet``: before, ``corpus.local_text`` and the evaluation's ``read_local``
took a named ``*.geoparquet`` file for no text ("a Parquet file, not text: name it *.parquet") and left it out of a
folder. The reference: ``datasets.load_dataset`` on the same file (a folder holding it alone: datasets picks the
builder by its suffix)."""

from __future__ import annotations

import pytest
from datasets import Dataset, load_dataset

from torchtune_longshort.data import corpus
from torchtune_longshort.data.resume_reading import earlier_clauses
from torchtune_longshort.eval.tasks.common.local_files import read_local

TEXTS = [f"book {i} " * 6 for i in range(4)]


def _rows(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    Dataset.from_dict({"text": TEXTS, "id": list(range(len(TEXTS)))}).to_parquet(str(path))
    return path


def _as_datasets_reads(folder):
    return [r["text"] for r in load_dataset(str(folder), split="train", streaming=True)]


@pytest.mark.parametrize("suffix", [".geoparquet", ".gpq"])
@pytest.mark.parametrize("named", ["file", "folder"])
def test_local_text_reads_a_parquet_builder_file_by_rows_as_datasets_does(tmp_path, suffix, named):
    f = _rows(tmp_path / "books" / f"a{suffix}")
    expected = _as_datasets_reads(f.parent)
    assert expected == TEXTS
    assert list(corpus.local_text(str(f if named == "file" else f.parent))()) == expected


@pytest.mark.parametrize("suffix", [".geoparquet", ".gpq"])
def test_the_evaluation_reads_a_parquet_builder_file_by_rows(tmp_path, suffix):
    f = _rows(tmp_path / "eval" / f"a{suffix}")
    expected = _as_datasets_reads(f.parent)
    assert list(read_local(str(f), "text", False, files_setting="ppl_data_files")) == expected
    assert list(read_local(str(f.parent), "text", False, files_setting="ppl_data_files")) == expected


def test_a_run_saved_when_geoparquet_files_were_no_text_is_not_resumed_on_their_rows(tmp_path):
    geo, plain = _rows(tmp_path / "g" / "a.geoparquet"), _rows(tmp_path / "p" / "a.parquet")
    saved = {"reading": 6}  # a data state of the version before (mark 7)
    said = earlier_clauses(corpus.local_text(str(geo.parent)).earlier_reading, saved)
    assert f"took a .geoparquet file named as such for no text (refused, or one record skipped), and left it out of " \
        f"a folder ({geo} here" in said
    assert earlier_clauses(corpus.local_text(str(plain.parent)).earlier_reading, saved) == ""


def test_a_parquet_file_under_another_name_is_told_every_suffix_datasets_reads_it_by(tmp_path):
    # before: "a Parquet file, not text: name it *.parquet", the one suffix of the three; the reference is datasets'
    # own table of suffixes and builders, and each suffix named reads the same file by its rows
    import re
    import shutil

    from datasets.packaged_modules import _EXTENSION_TO_MODULE

    wrong = _rows(tmp_path / "books" / "a.txt")
    with pytest.raises(ValueError) as err:
        list(corpus.local_text(str(wrong))())
    assert "a Parquet file, not text" in str(err.value)
    named = re.findall(r"\*(\.\w+)", str(err.value).split("not text: ", 1)[1])
    assert set(named) == {s for s, (builder, _) in _EXTENSION_TO_MODULE.items() if builder == "parquet"}
    for suffix in named:
        renamed = shutil.copy(wrong, tmp_path / f"a{suffix}")
        assert list(corpus.local_text(str(renamed))()) == TEXTS


def test_a_parquet_file_under_another_name_is_not_told_to_skip_it(tmp_path):
    # before, the refusal ended "mend the record, or skip such records with dataset.skip_bad_records=True": skipping
    # drops the whole file, every row pyarrow reads in it, while the rename it names reads them
    import pyarrow.parquet as pq

    wrong = _rows(tmp_path / "books" / "a.txt")
    (tmp_path / "books" / "b.txt").write_text("another book")
    skipped = [d for d in corpus.local_text(str(wrong.parent), skip_bad_records=True)() if d]
    assert skipped == ["another book"] and pq.read_table(wrong).column("text").to_pylist() == TEXTS
    with pytest.raises(ValueError) as err:
        corpus.local_text(str(wrong.parent))
    said = str(err.value)
    assert said.startswith(f"{wrong}: a Parquet file, not text: name it *.parquet") and "skip" not in said, said
    assert said.endswith("whose rows are read as records") and "mend" not in said, said
