"""made_folders.named_in_place: an OSError writing a file in the folder aside is raised again naming that file under
the target, with its own errno and strerror and the original as its cause; a copy's error names the file written
(``filename2``), not the file read; a bytes filename or a file outside the folder aside leaves the error as it was.
References: errno's codes, os.strerror, and the OSError attributes Python sets."""

import errno
import os
from pathlib import Path

from torchtune_longshort.made_folders import named_in_place


def test_a_quota_error_in_the_folder_aside_is_named_under_the_target_with_its_errno(tmp_path):
    aside, target = tmp_path / ".out.tag_x", tmp_path / "out"
    e = OSError(errno.EDQUOT, os.strerror(errno.EDQUOT), str(aside / "sub" / "tokenizer.json"))
    got = named_in_place(e, aside, target)
    assert (got.errno, got.strerror) == (errno.EDQUOT, os.strerror(errno.EDQUOT))
    assert Path(got.filename) == target / "sub" / "tokenizer.json"
    assert got.__cause__ is e


def test_a_copys_error_names_the_file_written_not_the_file_read(tmp_path):
    aside, target = tmp_path / ".out.tag_x", tmp_path / "out"
    e = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "trained" / "m.model"), None,
                str(aside / "m.model"))
    assert (e.filename, e.filename2) == (str(tmp_path / "trained" / "m.model"), str(aside / "m.model"))
    assert Path(named_in_place(e, aside, target).filename) == target / "m.model"


def test_a_bytes_filename_and_a_file_elsewhere_leave_the_error_as_it_was(tmp_path):
    aside, target = tmp_path / ".out.tag_x", tmp_path / "out"
    as_bytes = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), os.fsencode(aside / "m.model"))
    elsewhere = OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(tmp_path / "m.model"))
    assert named_in_place(as_bytes, aside, target) is as_bytes
    assert named_in_place(elsewhere, aside, target) is elsewhere
