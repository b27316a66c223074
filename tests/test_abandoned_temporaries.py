"""A writer of ``atomic_open`` killed with SIGKILL (no Python left to clean up) left its ``.<name>.<8 hex>.tmp``
(a44b16f's temporary file) beside the output for good, hidden, however often the file was written again. A later
write of that name that is in place now removes such a file once it is a day old (a live writer's is newer), and
nothing else: a link, another user's name pattern, another target's, a file with a second link, a fresh one. The
references: the temporary file the killed child itself left (``os.listdir`` before the kill), and the bytes and
links this test wrote."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time

import pytest

from torchtune_longshort.output_guard import atomic_open, atomic_write_text
from torchtune_longshort.temporary_files import ABANDONED_AFTER_S

# a child that opens x.txt through atomic_open, writes half of it, says so and is killed while it waits
CHILD = """
import sys, time
from torchtune_longshort.output_guard import atomic_open
writing = atomic_open(sys.argv[1])
f = writing.__enter__()
f.write("half"); f.flush()
print("open", flush=True)
time.sleep(60)
"""


def _killed_writer_left(folder):
    """The temporary file a writer of ``folder/x.txt`` killed with SIGKILL left (its name, read as it ran)."""
    p = subprocess.Popen([sys.executable, "-c", CHILD, str(folder / "x.txt")], stdout=subprocess.PIPE, text=True,
                         env={**os.environ, "LONGSHORT_TEST_FRESH": "1"})  # a process of its own (no zygote): killed
    try:
        assert p.stdout.readline() == "open\n"
        left = [n for n in os.listdir(folder) if n.endswith(".tmp")]
    finally:
        p.send_signal(signal.SIGKILL)
        p.wait()
    assert p.returncode == -signal.SIGKILL and len(left) == 1 and (folder / left[0]).read_text() == "half"
    return left[0]


def _age(path, seconds):
    t = time.time() - seconds
    os.utime(path, (t, t), follow_symlinks=False)


def test_a_later_write_removes_what_a_killed_writer_left_a_day_ago_and_nothing_else(tmp_path, capsys):
    left = _killed_writer_left(tmp_path)
    old = ABANDONED_AFTER_S + 60
    _age(tmp_path / left, old)
    kept = {  # name: content (a link: "-> target"), each a day old unless said
        "x.txt.tmp": "the user's", ".x.txt.tmp": "the user's", ".x.txt.1234567.tmp": "7 hex digits",
        ".x.txt.ABCDEF12.tmp": "capitals", ".y.txt.12345678.tmp": "another target's", "mine.txt": "the user's",
        ".x.txt.0badcafe.tmp": "-> mine.txt", ".x.txt.dead0000.tmp": "-> gone",
    }
    for name, content in kept.items():
        if content.startswith("-> "):
            os.symlink(content[3:], tmp_path / name)
        else:
            (tmp_path / name).write_text(content)
        _age(tmp_path / name, old)
    (tmp_path / ".x.txt.5eedf00d.tmp").write_text("a live writer's")  # fresh
    if os.geteuid() == 0:  # another user's (only root can give a file away)
        kept[".x.txt.22222222.tmp"] = "another user's"
        (tmp_path / ".x.txt.22222222.tmp").write_text("another user's")
        os.chown(tmp_path / ".x.txt.22222222.tmp", 12345, 12345)
        _age(tmp_path / ".x.txt.22222222.tmp", old)
    (tmp_path / "linked.txt").write_text("linked")
    os.link(tmp_path / "linked.txt", tmp_path / ".x.txt.11111111.tmp")
    _age(tmp_path / ".x.txt.11111111.tmp", old)

    with pytest.raises(RuntimeError):  # a write that fails removes nothing of another's
        with atomic_open(tmp_path / "x.txt") as f:
            f.write("broken")
            raise RuntimeError("stop")
    assert (tmp_path / left).read_text() == "half"

    atomic_write_text(tmp_path / "x.txt", "whole")
    assert (tmp_path / "x.txt").read_text() == "whole"
    assert not os.path.lexists(tmp_path / left)
    assert left in capsys.readouterr().err
    for name, content in kept.items():
        got = f"-> {os.readlink(tmp_path / name)}" if (tmp_path / name).is_symlink() else (tmp_path / name).read_text()
        assert got == content, name
    assert (tmp_path / ".x.txt.5eedf00d.tmp").read_text() == "a live writer's"
    assert (tmp_path / ".x.txt.11111111.tmp").read_text() == "linked" and (tmp_path / "linked.txt").stat().st_nlink == 2
    assert sorted(os.listdir(tmp_path)) == sorted([*kept, "x.txt", ".x.txt.5eedf00d.tmp", "linked.txt",
                                                   ".x.txt.11111111.tmp"])


def test_a_fresh_leftover_stays_until_it_is_a_day_old(tmp_path):
    left = _killed_writer_left(tmp_path)
    atomic_write_text(tmp_path / "x.txt", "whole")  # minutes old: it may be a writer still at work
    assert (tmp_path / left).read_text() == "half"
    _age(tmp_path / left, ABANDONED_AFTER_S + 60)
    atomic_write_text(tmp_path / "x.txt", "again")
    assert not os.path.lexists(tmp_path / left) and (tmp_path / "x.txt").read_text() == "again"


def test_a_targets_name_with_glob_characters_an_hour_old_leftover_and_a_quiet_caller(tmp_path, capsys):
    """``remove_abandoned_temporaries`` itself: a target named ``x[1].txt`` (its leftovers found by that literal name,
    not as a pattern), a leftover two hours old kept (a day is the README's word), ``say=False`` prints nothing."""
    from torchtune_longshort.temporary_files import remove_abandoned_temporaries

    target = tmp_path / "x[1].txt"
    for name, age in ((".x[1].txt.0123abcd.tmp", ABANDONED_AFTER_S + 60), (".x[1].txt.4567cdef.tmp", 2 * 3600)):
        (tmp_path / name).write_text("half")
        _age(tmp_path / name, age)
    assert remove_abandoned_temporaries(target, say=False) == [".x[1].txt.0123abcd.tmp"]
    assert capsys.readouterr().err == ""
    assert sorted(os.listdir(tmp_path)) == [".x[1].txt.4567cdef.tmp"]
