"""output_guard.start_names where a kill test does not look: a list another process made meanwhile (between the
check and the link) is kept as it is; a file system without hard links (EPERM, as vfat answers link(2)) gets the empty
file; the temporary file is gone in each case. output_guard.is_written_file: a link to the file written is not it,
nor a file put at its name since. References: errno's codes, os.listdir, json.loads, os.fstat."""

import errno
import json
import os

from torchtune_longshort import output_guard
from torchtune_longshort.output_guard import is_written_file, read_names, start_names


def test_a_new_list_is_json_and_leaves_no_temporary_file(tmp_path):
    start_names(tmp_path / "rows" / "list.json")
    assert os.listdir(tmp_path / "rows") == ["list.json"]
    assert json.loads((tmp_path / "rows" / "list.json").read_text()) == []


def test_a_list_made_meanwhile_by_another_process_is_kept(tmp_path, monkeypatch):
    listed = tmp_path / "list.json"
    listed.write_text('["1k/qa1.jsonl"]\n')
    monkeypatch.setattr(output_guard.os.path, "lexists", lambda p: False)  # made after this process looked
    start_names(listed)
    assert read_names(listed) == ["1k/qa1.jsonl"] and os.listdir(tmp_path) == ["list.json"]


def test_a_file_system_without_hard_links_gets_an_empty_list_file(tmp_path, monkeypatch):
    def no_links(src, dst, **kwargs):
        raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(src), None, str(dst))

    monkeypatch.setattr(output_guard.os, "link", no_links)
    start_names(tmp_path / "list.json")
    assert os.listdir(tmp_path) == ["list.json"] and (tmp_path / "list.json").stat().st_size == 0
    assert read_names(tmp_path / "list.json") is None  # no names known: nothing there is taken for the command's


def test_a_link_to_the_written_file_is_not_it(tmp_path):
    written = tmp_path / "report.md"
    with open(written, "w") as f:
        st = os.fstat(f.fileno())
    (tmp_path / "link.md").symlink_to(written)
    assert is_written_file(written, st)
    assert not is_written_file(tmp_path / "link.md", st)
    assert not is_written_file(written, None)
    written.unlink()
    written.write_text("the user's")  # another file at the name since
    assert not is_written_file(written, st) or os.stat(written).st_ino == st.st_ino


def test_a_file_put_at_the_name_right_after_the_rename_is_not_listed(tmp_path, monkeypatch):
    from torchtune_longshort.output_guard import WRITING, atomic_open, undone_on_failure

    real_replace = os.replace

    def then_another_process(src, dst):  # another writer replaces the file the moment it is in place
        real_replace(src, dst)
        if os.path.basename(dst) != "report.md":  # the record's own writes
            return
        os.unlink(dst)
        with open(dst, "w") as f:
            f.write("another process's")

    folder = tmp_path / "out"
    with undone_on_failure(folder, ["report.md"]):
        with atomic_open(folder / "notes.md") as f:  # listed: the record exists, as a kill would leave it
            f.write("ours")
        monkeypatch.setattr(output_guard.os, "replace", then_another_process)
        with atomic_open(folder / "report.md") as f:
            f.write("ours")
        monkeypatch.undo()
        listed = read_names(folder / WRITING)  # what a run killed now would take for its own
    assert "notes.md" in listed and "report.md" not in listed, listed
    assert (folder / "report.md").read_text() == "another process's"
