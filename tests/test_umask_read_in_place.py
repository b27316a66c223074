"""made_folders.folder_beside and output_guard.plain_file_mode read the umask with ``os.umask(0)`` and set it back:
in between, a file another thread created got mode 0666 (a folder 0777), whatever the user's umask. They now read it
without changing it (``/proc/self/status``'s ``Umask:`` line; ``os.umask`` only where that line is missing).
References: ``os.umask``'s own report, and the modes ``os.mkdir`` / ``open`` give under the same umask."""

from __future__ import annotations

import os
import sys

import pytest

from torchtune_longshort.made_folders import folder_beside
from torchtune_longshort.output_guard import plain_file_mode

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/status is Linux's")


def _never_changed(*_a):
    raise AssertionError("os.umask called: the umask was changed to be read")


@linux_only
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_folders_and_files_get_the_umask_s_mode_without_changing_it(tmp_path, monkeypatch, mask):
    old = os.umask(mask)
    try:
        os.mkdir(tmp_path / "plain")  # the references, made under the same umask
        (tmp_path / "plain.txt").write_text("x")
        written = tmp_path / "written.bin"
        written.write_text("x")
        os.chmod(written, 0o600)  # as safetensors leaves it
        with monkeypatch.context() as m:
            m.setattr(os, "umask", _never_changed)
            folder = folder_beside(tmp_path / "target", "tag")
            plain_file_mode(written)
    finally:
        os.umask(old)
    assert os.stat(folder).st_mode & 0o7777 == os.stat(tmp_path / "plain").st_mode & 0o7777
    assert os.stat(written).st_mode & 0o7777 == os.stat(tmp_path / "plain.txt").st_mode & 0o7777


@linux_only
@pytest.mark.parametrize("mask", [0o022, 0o077, 0o002])
def test_the_umask_read_is_the_one_os_umask_reports(monkeypatch, mask):
    from torchtune_longshort.umask import current_umask

    old = os.umask(mask)
    try:
        with monkeypatch.context() as m:
            m.setattr(os, "umask", _never_changed)
            read = current_umask()
    finally:
        assert os.umask(old) == mask  # what os.umask itself reports, and nothing changed it
    assert read == mask


# no Umask: line (an older kernel), or one that is no octal number (a sandbox that writes it otherwise)
@pytest.mark.parametrize("lines", ["State:\tR (running)\n", "Umask:\tunknown\n"], ids=["no line", "no octal"])
def test_without_a_readable_status_line_it_falls_back_and_restores(tmp_path, monkeypatch, lines):
    from torchtune_longshort import umask

    status = tmp_path / "status"
    status.write_text("Name:\tpython\n" + lines)
    monkeypatch.setattr(umask, "_STATUS", str(status))
    old = os.umask(0o027)
    try:
        read = umask.current_umask()
    finally:
        assert os.umask(old) == 0o027  # set back as it was
    assert read == 0o027
