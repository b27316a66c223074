"""The evaluation's reason for a whole file of another kind among ``<prefix>_data_files`` (a compressed file, a zip
archive) ends at the file's own fix: before, it ended "(or skip such records: --metadata '{"ppl_skip_bad_records":
true}')", and skipping drops the whole file, whose text gzip's and zipfile's own reads give."""

from __future__ import annotations

import gzip
import zipfile

import pytest

from torchtune_longshort.eval.tasks.common.long_text import texts_from_metadata
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

TEXT = "a page of a book " * 8


def _gzip(path):
    path.write_bytes(gzip.compress(TEXT.encode(), mtime=0))
    return gzip.decompress(path.read_bytes()).decode(), "a gzip-compressed file, not text: decompress it first"


def _zip(path):
    with zipfile.ZipFile(path, "w") as z:
        z.writestr("page.txt", TEXT)
    with zipfile.ZipFile(path) as z:
        return z.read("page.txt").decode(), "a zip archive, not text: extract its files and name them"


@pytest.mark.parametrize("prefix", ["ppl", "mis"])
@pytest.mark.parametrize("kind", [_gzip, _zip])
def test_a_whole_file_of_another_kind_is_not_told_to_be_skipped(tmp_path, prefix, kind):
    wrong = tmp_path / "a.txt"
    held, fix = kind(wrong)
    assert held == TEXT  # the file holds a document, which its own reader reads
    (tmp_path / "b.txt").write_text("another book")
    meta = {f"{prefix}_data_files": str(tmp_path)}
    assert list(texts_from_metadata({**meta, f"{prefix}_skip_bad_records": True}, prefix)) == ["another book"]
    with pytest.raises(TaskDataError) as refused:
        list(texts_from_metadata(meta, prefix))
    said = str(refused.value)
    assert said.startswith(f"{wrong}: {fix}") and "skip" not in said, said
