"""A folder of data files holding an entry of a read suffix that is no file (a symbolic link to a missing file, a
FIFO) was read without it and without a word (longshort_ppl's ppl_data_files, passkey's haystack, corpus.local_text's
path: fewer files than the folder names); it is now named, never opened (a FIFO would block), as a path that names
nothing is. The reference: os.path.lexists / os.path.isfile on the same entries."""

from __future__ import annotations

import os

import pytest

from torchtune_longshort.data.file_paths import resolve_files
from torchtune_longshort.eval.tasks.common.local_files import read_local
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError


def _folder(tmp_path):
    folder = tmp_path / "corp"
    folder.mkdir()
    (folder / "good.txt").write_text("def f():\n    return 1\n")
    os.symlink(tmp_path / "gone.txt", folder / "a_link.txt")
    os.mkfifo(folder / "b_pipe.txt")
    os.symlink(tmp_path / "gone", folder / ".#good.txt")  # an editor's lock: hidden, left out as before
    os.symlink(tmp_path / "gone", folder / "notes.md")  # a suffix not read: left out as before
    entries = sorted(folder.iterdir())
    assert [p.name for p in entries if os.path.lexists(p) and not os.path.isfile(p)] == [
        ".#good.txt", "a_link.txt", "b_pipe.txt", "notes.md"]
    return folder


def test_a_folders_link_to_nothing_or_fifo_is_named_not_left_out(tmp_path):
    folder = _folder(tmp_path)
    with pytest.raises(FileNotFoundError) as info:
        resolve_files(str(folder), (".txt",), "dataset.path")
    said = str(info.value)
    assert said.startswith(f"dataset.path={str(folder)!r}: {folder / 'a_link.txt'} is a symbolic link to "
                           f"{tmp_path / 'gone.txt'}, which is no file"), said
    assert "(and 1 more such), no file to read: remove it from the folder" in said and "\n" not in said
    with pytest.raises(TaskDataError, match="a_link.txt is a symbolic link"):  # the length scores NaN with it
        list(read_local(str(folder), "text", skip_bad_records=True))
    os.remove(folder / "a_link.txt")
    with pytest.raises(FileNotFoundError, match=r"b_pipe.txt is a FIFO \(named pipe\), no file to read"):
        resolve_files(str(folder), (".txt",), "dataset.path")
    os.remove(folder / "b_pipe.txt")
    assert resolve_files(str(folder), (".txt",), "dataset.path") == [folder / "good.txt"]


def test_the_evals_refusal_says_the_fix_once(tmp_path):
    # longshort-eval ... --metadata '{"ppl_data_files":"corp3"}' ended '... remove it from the folder (or put back
    # what it stands for): name files that exist'; it now ends as resolve_files' own words (the reference) do, and a
    # path that names nothing keeps ': name files that exist' (its words say no fix)
    from torchtune_longshort.eval.tasks import _check_local_files

    folder = _folder(tmp_path)
    for path, fix in ((str(folder), ""), (str(tmp_path / "nope"), ": name files that exist")):
        with pytest.raises(FileNotFoundError) as own:
            resolve_files(path, (".txt", ".jsonl", ".json", ".parquet"), "ppl_data_files")
        with pytest.raises(TaskDataError) as checked:
            _check_local_files("ppl_data_files", path)
        with pytest.raises(TaskDataError) as read:
            list(read_local(path, "text", skip_bad_records=True, files_setting="ppl_data_files"))
        assert str(checked.value) == str(read.value) == f"{own.value}{fix}"
