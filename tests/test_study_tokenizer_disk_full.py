"""The study's pre-flight trains the study's tokenizer aside and puts it in ``<out>/tokenizer``; on a full disk (a 12
KiB-free tmpfs as --out) that copy (shutil.copytree) ended in shutil.Error's traceback, exit 1, and left
``<out>/tokenizer`` cut (``tokenizer.model`` 0 bytes, ``tokenizer.json`` 4 KiB), which the rerun after freeing space
took as trained: every run then failed, 'tokenizer.path=.../tokenizer: ... cannot read it (RuntimeError: INTERNAL:
unk is not defined.)'. Now the copy goes beside and is renamed into place whole (preflight._put_in_place): the error
names the file in ``<out>/tokenizer`` and nothing is left; the study's main turns it into one line, exit 2. A real full
disk (a 12k tmpfs, ``disk_full.on_small_disk``: a fresh interpreter, ~5 s) checks the line; the rerun after room is
made runs in this process, the disk filled by patching shutil.copyfile for the second file; the end-to-end run
(``--quick``, 19 s) was walked on a tmpfs instead of tested here."""

from __future__ import annotations

import errno
import os
import re
import shlex
import shutil
from pathlib import Path

import pytest
from disk_full import needs_unshare, on_small_disk


def test_a_full_disk_while_the_tokenizer_is_put_in_place_leaves_none(tmp_path, monkeypatch, sp_tokenizer_dir):
    from torchtune_longshort.refusals import fault_line
    from torchtune_longshort.study import preflight

    trained, target, real = tmp_path / "trained", tmp_path / "st" / "tokenizer", shutil.copyfile
    shutil.copytree(sp_tokenizer_dir, trained)
    names = sorted(p.name for p in trained.iterdir())
    assert len(names) >= 2
    copied = []

    def full(src, dst, *args, **kwargs):
        copied.append(Path(dst).name)
        if len(copied) == 2:  # the first file whole, the second finds the disk full
            # as shutil's sendfile copy raises it: the file read as filename, the file written as filename2 (the
            # fourth argument is winerror: OSError(e, s, src, dst) left filename2 None and named the source written)
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(src), None, str(dst))
        return real(src, dst, *args, **kwargs)

    monkeypatch.setattr(shutil, "copyfile", full)
    with pytest.raises(OSError) as raised:
        preflight._put_in_place(trained, target)
    assert not target.exists() and os.listdir(tmp_path / "st") == []  # no cut tokenizer, no copy of its own left
    line = fault_line(raised.value)
    assert line.startswith(f"no space left on the disk writing {target / names[1]} ("), line
    monkeypatch.setattr(shutil, "copyfile", real)  # room made: the rerun puts it in place whole
    preflight._put_in_place(trained, target)
    assert all((target / n).read_bytes() == (trained / n).read_bytes() for n in names)


def test_a_file_the_copy_cannot_read_is_named_where_it_lies(tmp_path, sp_tokenizer_dir):
    """A trained file the copy cannot open (a link whose file is gone: ENOENT from the real ``open``, no patching) was
    named as ``<out>/tokenizer``'s, a file the user never had ("[Errno 2] No such file or directory:
    'st/tokenizer/tokenizer.model'"); a read error keeps naming the file read, and nothing is left."""
    from torchtune_longshort.study import preflight

    trained, target = tmp_path / "trained", tmp_path / "st" / "tokenizer"
    shutil.copytree(sp_tokenizer_dir, trained)
    gone = trained / "tokenizer.model"
    gone.unlink()
    gone.symlink_to(tmp_path / "deleted.model")
    with pytest.raises(OSError) as raised:
        preflight._put_in_place(trained, target)
    assert raised.value.errno == errno.ENOENT and raised.value.filename == str(gone), raised.value
    assert not target.exists() and os.listdir(tmp_path / "st") == []


@needs_unshare
def test_a_real_full_disk_is_told_naming_the_file_under_out_tokenizer(tmp_path, sp_tokenizer_dir):
    """The copy on a 12k tmpfs: shutil's own ENOSPC (it names the file read and the file written, in the folder aside)
    is told naming the file under ``<out>/tokenizer``, and the disk is left empty."""
    disk = tmp_path / "disk"
    target = disk / "st" / "tokenizer"
    code = ("import sys; from pathlib import Path; from torchtune_longshort.study.preflight import _put_in_place; "
            "from torchtune_longshort.refusals import fault_line\n"
            f"try: _put_in_place(Path({str(sp_tokenizer_dir)!r}), Path({str(target)!r}))\n"
            "except OSError as e: print(fault_line(e))")
    p = on_small_disk(disk, "12k", f"mkdir {disk / 'st'} && python -c {shlex.quote(code)}; "
                      f"echo \"#ls\"; ls -A {disk}/st")
    line, listed = p.stdout.split("#ls")
    written = re.search(r"^no space left on the disk writing (\S+) \(", line.strip())
    assert written and Path(written[1]).parent == target, p.stdout + p.stderr
    assert Path(written[1]).name in os.listdir(sp_tokenizer_dir) and ".copying_" not in line, line
    assert listed.split() == []  # no cut tokenizer, no copy of its own left
