"""A local data file the evaluation may not open (chmod 000, as a user other than root) ended the whole run with
PermissionError (longshort_ppl's ppl_data_files over a folder holding it, passkey's haystack: the other tasks and
lengths lost). Now that length scores NaN naming the file and the system's reason, as a file gone since the run
started stops a training run (DataSourceError: no skipping passes it), and the other lengths score. The reference:
the strerror of the errno the system gives (as root, where chmod 000 does not stop a read, open is made to raise
what it raises for another user)."""

from __future__ import annotations

import builtins
import errno
import io
import os

import pytest

from torchtune_longshort.eval.tasks.common.local_files import read_local
from torchtune_longshort.eval.tasks.common.long_text import readable_texts
from torchtune_longshort.eval.tasks.common.pack_task import sweep_dataset
from torchtune_longshort.eval.tasks.common.unavailable import ERROR_FIELD, TaskDataError


def _locked(tmp_path, monkeypatch):
    folder = tmp_path / "corp"
    folder.mkdir()
    (folder / "good.txt").write_text("def f():\n    return 1\n")
    locked = folder / "locked.txt"
    locked.write_text("secret\n")
    os.chmod(locked, 0)
    if os.geteuid() == 0:
        real = io.open

        def denying(file, *a, **kw):
            if os.fspath(file) == str(locked):
                raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), str(locked))
            return real(file, *a, **kw)

        monkeypatch.setattr(io, "open", denying)
        monkeypatch.setattr(builtins, "open", denying)
    return folder, locked


def test_a_file_the_evaluation_cannot_open_leaves_its_length_unscored_not_the_run(tmp_path, monkeypatch):
    folder, locked = _locked(tmp_path, monkeypatch)
    said = f"{locked}: cannot be read ({os.strerror(errno.EACCES)}): make it readable, or move it out of the data"
    for skip in (False, True):
        with pytest.raises(TaskDataError) as info:
            list(readable_texts(read_local(str(folder), "text", skip_bad_records=skip), "or skip", "source 'local'"))
        assert str(info.value) == "source 'local': " + said
    # the run's lengths: 8 reads the folder (NaN with the reason), 16 the good file alone (scored)
    rows = sweep_dataset("longshort_ppl", [8, 16], lambda n: [{"text": t, "length": n} for t in readable_texts(
        read_local(str(folder) if n == 8 else str(folder / "good.txt"), "text", skip_bad_records=False), "or skip")],
        lambda n: {"text": "", "length": n})
    by_length = {row["length"]: (row["text"], row[ERROR_FIELD]) for row in rows["test"]}
    assert by_length == {8: ("", "longshort_ppl at length 8: " + said), 16: ("def f():\n    return 1\n", "")}
