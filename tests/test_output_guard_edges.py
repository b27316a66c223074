"""The edges of output_guard.py the writers' tests do not reach: a NumPy float32's NaN written as null, a names file
that is a list of other things read as no list, '--out REPORT.JSON' taken for a file as 'report.json' is, and a
folder made beside a target given a plain mkdir's mode.

References: json.loads of what is written; os.mkdir's own mode under the same umask."""

import json
import os

import numpy as np
import pytest

from torchtune_longshort.made_folders import folder_beside
from torchtune_longshort.output_guard import check_output_folder, read_names, strict_json


def test_a_numpy_float32_is_written_as_a_number_and_its_nan_as_null():
    assert json.loads(strict_json({"a": np.float32("nan"), "b": [np.float32(1.5), 2]})) == {"a": None, "b": [1.5, 2]}


def test_a_names_file_of_other_things_than_names_is_no_list(tmp_path):
    (tmp_path / "names.json").write_text(json.dumps([1, 2]))
    assert read_names(tmp_path / "names.json") is None
    (tmp_path / "names.json").write_text(json.dumps(["a.md", "b/c.png"]))
    assert read_names(tmp_path / "names.json") == ["a.md", "b/c.png"]


@pytest.mark.parametrize("name", ["report.json", "REPORT.JSON", "Table.Md"])
def test_an_out_named_as_a_file_is_refused_whatever_its_case(tmp_path, name):
    with pytest.raises(ValueError, match=r"^--out='.*' names a \.\w+ file, where the command wants the folder"):
        check_output_folder(tmp_path / name, "--out", ["report.md"], lambda folder: False)


def test_a_folder_beside_a_target_has_a_plain_mkdirs_mode(tmp_path):
    mask = os.umask(0o022)
    try:
        os.mkdir(tmp_path / "plain")  # the reference
        made = folder_beside(tmp_path / "cache" / "model", "convert")
    finally:
        os.umask(mask)
    assert made.parent == tmp_path / "cache" and made.name.startswith(".model.convert_")
    assert made.stat().st_mode & 0o777 == (tmp_path / "plain").stat().st_mode & 0o777 == 0o755


@pytest.mark.parametrize("kind", ["file", "dangling link"])
def test_a_file_where_the_command_makes_a_folder_is_refused_naming_it(tmp_path, kind):
    """The BABILong generator's --out holding a file '1k': it made every row, then stopped at its own mkdir
    ('[Errno 17] File exists'). Reference: os.makedirs(exist_ok=True), which the writer calls, fails on it."""
    if kind == "file":
        (tmp_path / "1k").write_text("mine")
    else:
        (tmp_path / "1k").symlink_to(tmp_path / "nowhere")
    with pytest.raises(FileExistsError):
        os.makedirs(tmp_path / "1k", exist_ok=True)
    with pytest.raises(NotADirectoryError, match=r"^--out='.*' holds '1k', a file where the command writes the "
                       r"folder '1k/': move it away, or choose another --out$"):
        check_output_folder(tmp_path, "--out", ["1k/qa1.jsonl", "2k/qa1.jsonl"], lambda folder: False)
    with pytest.raises(NotADirectoryError, match="holds '1k', a file where"):  # a folder above the file's folder too
        check_output_folder(tmp_path, "--out", ["1k/deep/qa1.jsonl"], lambda folder: False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["1k"]
    check_output_folder(tmp_path, "--out", ["2k/qa1.jsonl", "*.png"], lambda folder: False)  # a folder it skips
    (tmp_path / "r*").write_text("mine")  # a glob's folder part is no name: a file named like it is not in the way
    check_output_folder(tmp_path, "--out", ["r*/x.png"], lambda folder: False)


def test_a_replaced_name_outside_what_the_command_writes_is_not_removed(tmp_path):
    """``undone_on_failure``'s ``replaces`` (an earlier record's names) removes only those the command writes
    (``patterns``): a user's ``notes.txt`` named there stays, a stale ``old.png`` goes (a hand mutant that removed
    every replaced name survived)."""
    from torchtune_longshort.output_guard import atomic_write_text, undone_on_failure

    (tmp_path / "notes.txt").write_text("mine")
    (tmp_path / "old.png").write_bytes(b"png")
    with undone_on_failure(tmp_path, ["report.md", "*.png"], replaces=["notes.txt", "old.png"]):
        atomic_write_text(tmp_path / "report.md", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt", "report.md"]
    assert (tmp_path / "notes.txt").read_text() == "mine"
