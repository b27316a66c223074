"""``longshort-eval peft-base STEP --out DIR``'s own folder. An existing empty ``--out`` was replaced by renaming the
folder built aside onto it, so the user's folder lost its mode (a group-shared ``chmod 2770`` one came back 0755, a new
inode); it is now kept and written into (``os.stat`` before and after: the reference). A write that failed midway (a
full disk: a real ENOSPC from a small tmpfs in a user and mount namespace, ``disk_full.on_small_disk``, no root; where
there are none, a file the command cannot read) removed the half-built folder but left the parents the command had made
for ``--out``; they are taken back now, and nothing the command did not make (the disk's other file) is touched."""

from __future__ import annotations

import errno
import os
import stat

import pytest
from disk_full import WHY_NOT, needs_unshare, on_small_disk

pytest.importorskip("peft")

from test_peft_adapter_other_step import yarn_run  # noqa: E402
from test_peft_base_folder import PROG, _with_tokenizer  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402


def test_an_empty_out_folder_is_written_into_and_keeps_its_mode(tmp_path, capsys):
    base, _, step3 = yarn_run(tmp_path)
    out = tmp_path / "shared_out"
    out.mkdir()
    os.chmod(out, 0o2750)  # the user's choice: setgid, no access for others
    before = os.stat(out)
    assert main([str(step3), "--out", str(out)], PROG) == 0
    after = os.stat(out)
    assert stat.S_IMODE(after.st_mode) == stat.S_IMODE(before.st_mode) == 0o2750
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)  # the same folder, not a replacement
    assert os.path.samefile(out / "model.safetensors", base / "model.safetensors")
    assert (out / "config.json").read_bytes() == (step3 / "config.json").read_bytes()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".shared_out.")] == []  # no folder aside left


def _on_small_disk(disk, size: str, step, out, fill: bool = True):
    """``longshort-eval peft-base step --out out`` run on ``disk``, a tmpfs of ``size`` (``disk_full.on_small_disk``:
    a user and mount namespace, no root), filled up first by a file of its own (not the command's: it must stay)
    unless not ``fill``; then the disk's listing and its room (``stat -f``: free blocks, block size, blocks)."""
    filler = f"dd if=/dev/zero of={disk}/theirs.bin bs=4096 2>/dev/null; " if fill else ""
    return on_small_disk(disk, size, f"{filler}longshort-eval peft-base {step} --out {out}; echo '#rc' $?; "
                                     f"echo '#ls' $(ls -A {disk}); stat -f -c '#room %a %S %b' {disk}")


def _marked(p, mark: str) -> str:
    return next(line for line in p.stdout.splitlines() if line.startswith(mark))[len(mark):].strip()


def test_a_write_that_fails_midway_takes_back_the_parents_it_made_and_nothing_else(tmp_path, capsys):
    base, _, step3 = yarn_run(tmp_path)
    _with_tokenizer(base, step3)
    disk = tmp_path / "disk"
    out = disk / "new" / "deeper" / "base"
    if not WHY_NOT:  # a real full disk (ENOSPC), no root needed
        p = _on_small_disk(disk, "64k", step3, out)
        err = p.stderr
        assert _marked(p, "#rc") == "2" and "Traceback" not in err, p.stdout + err
        assert os.strerror(errno.ENOSPC) in err or "disk" in err.lower() or "space" in err.lower(), err
        assert _marked(p, "#ls").split() == ["theirs.bin"], p.stdout
        assert base.joinpath("model.safetensors").is_file()
        return
    if os.geteuid() == 0:
        pytest.skip(f"no user namespaces here ({WHY_NOT}), and root reads any file")
    disk.mkdir()
    os.chmod(step3 / "tokenizer_config.json", 0)  # a user's run: a step's tokenizer file it cannot read
    try:
        with pytest.raises((SystemExit, OSError)):
            main([str(step3), "--out", str(out)], PROG)
        assert sorted(p.name for p in disk.iterdir()) == []
        assert base.joinpath("model.safetensors").is_file()
    finally:
        os.chmod(step3 / "tokenizer_config.json", 0o644)


@needs_unshare
def test_a_full_disk_is_told_with_the_room_the_write_found_not_the_room_its_cleanup_left(tmp_path):
    """A tokenizer.json larger than a 1 MiB tmpfs (SmolLM2's is 3.4 MiB): the line said "1 MiB free of 1 MiB", the
    room after the cleanup; it says now the room when the copy failed. Reference: a tmpfs a copy filled up until
    ENOSPC has no page left (0 B free), and after the cleanup ``statvfs`` sees it empty again."""
    base, _, step3 = yarn_run(tmp_path)
    _with_tokenizer(base, step3)
    with open(step3 / "tokenizer.json", "a") as f:
        f.write(" " * (2 << 20))  # trailing whitespace: the same JSON, 2 MiB more
    disk = tmp_path / "disk"
    p = _on_small_disk(disk, "1m", step3, disk / "base", fill=False)
    err = p.stderr
    assert _marked(p, "#rc") == "2", p.stdout + err
    free, block, blocks = map(int, _marked(p, "#room").split())
    assert free * block == blocks * block == 1 << 20  # the cleanup took back all it wrote
    assert "tokenizer.json (0 B free of 1 MiB on " in err and "when the write failed)" in err, err
    # the file as it would have been under --out: the folder aside it was written in is gone
    assert f"writing {disk / 'base' / 'tokenizer.json'} (" in err and ".peft_base_" not in err, err
    assert _marked(p, "#ls") == ""
