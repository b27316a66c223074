"""umask.current_umask where ``/proc/self/status``'s ``Umask:`` line cannot be read as octal (a kernel or a sandbox
that writes it otherwise): the umask is read the old way (``os.umask``, set back), not a ValueError. Reference:
``os.umask``'s own report."""

import os

from torchtune_longshort import umask


def test_a_umask_line_that_is_no_octal_number_falls_back_to_os_umask(tmp_path, monkeypatch):
    status = tmp_path / "status"
    status.write_text("Name:\tpython\nUmask:\tunknown\n")
    monkeypatch.setattr(umask, "_STATUS", str(status))
    old = os.umask(0o027)
    try:
        read = umask.current_umask()
    finally:
        assert os.umask(old) == 0o027  # set back as it was
    assert read == 0o027
