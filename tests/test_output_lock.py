"""The output-folder lock (``training.output_dir.OutputDirLock``, the recipe's ``output_dir`` and the study's
``--out``): who holds it, read from its file."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from disk_full import needs_unshare, on_small_disk


@pytest.mark.skipif(not Path("/proc/self/stat").is_file(), reason="start times come from Linux's /proc")
def test_a_lock_whose_pid_was_reused_is_stale(tmp_path):
    """A lock records its holder's PID and start time (field 22 of /proc/<pid>/stat). Before, a dead run's PID taken
    by an unrelated process kept the lock held forever; now a live PID that started at another time is stale. The
    right start time is live, and so is a lock file of the earlier format (the PID alone)."""
    from torchtune_longshort.training.output_dir import OutputDirInUse, OutputDirLock

    other = subprocess.Popen(["sleep", "60"])
    try:
        fields = Path(f"/proc/{other.pid}/stat").read_text().rsplit(")", 1)[1].split()
        started = fields[19]
        for content in (f"{other.pid} {started}\n", f"{other.pid}\n"):  # the holder itself; an old lock file
            (tmp_path / ".lock").write_text(content)
            with pytest.raises(OutputDirInUse, match=f"PID {other.pid}"):
                OutputDirLock(tmp_path).acquire()
        (tmp_path / ".lock").write_text(f"{other.pid} {int(started) + 1}\n")  # its PID, another process's start
        lock = OutputDirLock(tmp_path).acquire()
        mine = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19]
        assert (tmp_path / ".lock").read_text() == f"{os.getpid()} {mine}\n"
        lock.release()
        assert not (tmp_path / ".lock").exists()
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("kind", ["text", "folder", "link", "three numbers", "binary", "link to digits"])
def test_a_users_file_named_lock_is_refused_and_kept(tmp_path, kind):
    """A ``.lock`` that no start wrote (a user's notes, a folder, a link) is no stale lock: before, a file was
    deleted and the folder taken; now the start is refused, naming it, and it is left as it was. A lock is a plain
    file of at most two numbers (``<pid> <start>``), in UTF-8."""
    from torchtune_longshort.training.output_dir import OutputDirInUse, OutputDirLock

    lock = tmp_path / ".lock"
    if kind == "text":
        lock.write_text("my notes\n")
    elif kind == "folder":
        (lock / "inner").mkdir(parents=True)
    elif kind == "three numbers":
        lock.write_text("1 2 3\n")
    elif kind == "binary":
        lock.write_bytes(b"\xff\xfe\n")
    elif kind == "link to digits":
        (tmp_path / "pid").write_text("999999999\n")
        lock.symlink_to(tmp_path / "pid")
    else:
        lock.symlink_to(tmp_path / "elsewhere")
    before = sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*"))
    with pytest.raises(OutputDirInUse, match="holds '.lock', which is not a lock file this project wrote"):
        OutputDirLock(tmp_path).acquire()
    assert sorted(str(p.relative_to(tmp_path)) for p in tmp_path.rglob("*")) == before
    assert kind != "text" or lock.read_text() == "my notes\n"


def test_a_lock_file_created_but_not_yet_written_is_held(tmp_path):
    """Another run creates the lock file (O_EXCL) a moment before it writes its PID. An empty lock file was read as
    stale: a second run starting in that moment took the lock as well. Now an empty file is read again until it is
    written (held) or ~2 s have passed (a run killed between the two: stale, taken over)."""
    import threading

    from torchtune_longshort.training.output_dir import OutputDirInUse, OutputDirLock

    lock_file = tmp_path / ".lock"
    lock_file.touch()  # the first run's O_EXCL create; it writes its PID 0.3 s later
    writer = threading.Timer(0.3, lambda: lock_file.write_text(f"{os.getpid()}\n"))
    writer.start()
    try:
        with pytest.raises(OutputDirInUse, match=f"PID {os.getpid()}"):
            OutputDirLock(tmp_path).acquire()
    finally:
        writer.join()
    lock_file.write_text("")  # never written: its run died between create and write
    lock = OutputDirLock(tmp_path).acquire()
    assert lock_file.read_text().split()[0] == str(os.getpid())
    lock.release()



def test_two_starts_taking_over_one_stale_lock_do_not_both_hold_it(tmp_path, monkeypatch):
    """A killed run's stale lock (or a refused start's lock, released while others waited): two starts that both
    read it as stale both deleted it and made their own, the second deleting the first's fresh lock, and both held
    the folder (two runs resuming, mending or overwriting one output_dir). Now the read, the takeover and the new
    lock's write happen under an flock of the folder: one holds it, the other is refused naming the holder. (The
    second start is a thread here, paused between reading the lock and taking it over.)"""
    import threading

    from torchtune_longshort.training.output_dir import OutputDirInUse, OutputDirLock

    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / ".lock").write_text(f"{dead.pid}\n")
    read, paused, got = OutputDirLock._written_holder, threading.Event(), {}

    def read_then_pause(self, *args, **kwargs):
        holder = read(self, *args, **kwargs)
        if threading.current_thread().name == "second":
            paused.set()  # the stale lock read: the first start takes it now
            threading.Event().wait(0.5)
        return holder

    def second():
        try:
            got["second"] = OutputDirLock(tmp_path).acquire()
        except OutputDirInUse:
            got["second"] = None

    monkeypatch.setattr(OutputDirLock, "_written_holder", read_then_pause)
    other = threading.Thread(target=second, name="second")
    other.start()
    paused.wait(10)
    try:
        got["first"] = OutputDirLock(tmp_path).acquire()
    except OutputDirInUse:
        got["first"] = None
    other.join()
    assert [k for k, v in got.items() if v is not None and v.held] in (["first"], ["second"]), got



CLAIM_ON_FULL_DISK = """
import sys
from pathlib import Path
from torchtune_longshort.training.output_dir import claim_output_dir
Path(sys.argv[1], "empty").mkdir()
for out in (Path(sys.argv[1], "a", "b", "run"), Path(sys.argv[1], "empty")):
    try:
        claim_output_dir(out, resume=False, overwrite=False, written_here=("logs",))
    except OSError as e:
        print("refused:", e)
"""


@needs_unshare
def test_a_full_disk_while_claiming_the_folder_leaves_no_lock_or_folder(tmp_path):
    """A disk that filled as the recipe claimed output_dir (a 1 MiB tmpfs with one page free: its lock written, the
    marker not) was refused in one line (``tune run``: "no space left on the disk while setting up output_dir"), and
    left ``run/.lock`` and an empty ``run/.longshort_output`` behind: the lock was taken before the folder was
    prepared and nothing gave it back, and the marker was written in place. Now the claim gives back its lock and
    the folders it made, and the marker is written whole or not at all; a folder that existed stays, empty."""
    import sys

    disk = tmp_path / "disk"
    p = on_small_disk(disk, "1m", f"dd if=/dev/zero of={disk}/fill bs=4096 count=255 2>/dev/null && "
                                  f"{sys.executable} -c '{CLAIM_ON_FULL_DISK}' {disk} && find {disk} | sort")
    assert p.stdout.count("refused: [Errno 28] No space left on device") == 2, p.stdout + p.stderr
    assert p.stdout.splitlines()[2:] == [str(disk), f"{disk}/empty", f"{disk}/fill"], p.stdout


def test_the_other_ranks_of_a_launch_do_not_take_rank_zeros_lock_for_another_runs(tmp_path, monkeypatch):
    """Every rank checks the config (output_dir's rules included) in the recipe's constructor; rank 0 alone claims
    the folder, and NCCL's process group does not wait for the others, so a slower rank 1 could find rank 0's lock
    already written and refuse its own launch as "in use by another run (PID <rank 0>)". Another process's lock is
    still refused where the folder is claimed (rank 0, longshort-validate)."""
    from torchtune_longshort.training.output_dir import OutputDirInUse, check_output_dir, claim_output_dir

    out = tmp_path / "run"
    lock = claim_output_dir(out, resume=False, overwrite=False)
    (out / ".lock").write_text(f"{os.getppid()}\n")  # held by another live process: rank 0 of this launch
    try:
        monkeypatch.delenv("RANK", raising=False)
        with pytest.raises(OutputDirInUse, match=f"in use by another run \\(PID {os.getppid()}"):
            check_output_dir(out, resume=False, overwrite=False)
        monkeypatch.setenv("RANK", "1")
        monkeypatch.setenv("WORLD_SIZE", "2")
        check_output_dir(out, resume=False, overwrite=False)
    finally:
        (out / ".lock").unlink()
        lock.held = False


@pytest.mark.parametrize("change", [None, "add", "remove", "replace", "touch", "made and removed"])
def test_a_release_puts_the_folders_mtime_back_only_when_nothing_else_changed_in_it(tmp_path, change):
    """The lock file made and removed set the folder's mtime (a refused or finished-already resume); its release puts
    the mtime back, but not over a change of the run's own (a file added, removed or replaced while it held it):
    the folder's mtime is the change's then, as the file system set it. Nor over a change that leaves the entries as
    they were (it was put back over them): the user's ``touch -d`` of the folder meanwhile, a file another program
    made and removed there."""
    import time

    from run_folders import OLD_NS
    from torchtune_longshort.training.output_dir import OutputDirLock

    out = tmp_path / "run"
    out.mkdir()
    (out / "a").write_text("x")
    os.utime(out, ns=(OLD_NS, OLD_NS))
    lock = OutputDirLock(out).acquire()
    if change == "add":
        (out / "b").write_text("y")
    elif change == "remove":
        (out / "a").unlink()
    elif change == "replace":
        (out / "new").write_text("z")
        os.replace(out / "new", out / "a")
    elif change == "touch":
        os.utime(out, ns=(OLD_NS + 86_400 * 10**9,) * 2)  # touch -d 'a day later'
    elif change == "made and removed":
        time.sleep(0.05)  # past the file system's clock tick since the lock file was made
        (out / "tmp").write_text("y")
        (out / "tmp").unlink()
    changed_at = out.stat().st_mtime_ns
    lock.release()
    assert not (out / ".lock").exists()
    if change is None:
        assert out.stat().st_mtime_ns == OLD_NS
    else:
        assert changed_at != OLD_NS and out.stat().st_mtime_ns >= changed_at


@pytest.mark.parametrize("discard", [True, False])
def test_a_refused_new_run_gives_an_empty_folder_back_unmarked(tmp_path, discard):
    """A new run into an existing empty output_dir refused after its claim (a checkpoint whose weights do not fit the
    model: the setup's release(discard=True)) left the recipe's marker there, and the folder's mtime that moment;
    the folder is now as it was (empty, its mtime). A run that goes on (discard=False) keeps its marker."""
    from run_folders import OLD_NS
    from torchtune_longshort.training.output_dir import MARKER, claim_output_dir

    out = tmp_path / "run"
    out.mkdir()
    os.utime(out, ns=(OLD_NS, OLD_NS))
    lock = claim_output_dir(out, resume=False, overwrite=False)
    assert (out / MARKER).is_file()
    lock.release(discard=discard)
    if discard:
        assert os.listdir(out) == [] and out.stat().st_mtime_ns == OLD_NS
    else:
        assert os.listdir(out) == [MARKER]
