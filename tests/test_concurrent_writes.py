"""Two processes writing one shared file at once (a sweep's two terminals sharing a synthetic --cache, two
evaluations into one --output_path): each file in place is one writer's whole file, and neither writer fails."""

import threading
import time
from pathlib import Path

import pytest

from torchtune_longshort.output_guard import atomic_open, atomic_write_text, undone_on_failure


def test_a_second_writer_of_the_same_file_started_mid_write_and_neither_is_cut(tmp_path):
    # Both wrote through the one temporary file '<name>.tmp': the second truncated and rewrote the first's, the first
    # then moved the second's half-written file into place (a cache entry a later run trusted) and the second's own
    # os.replace ended in "[Errno 2] No such file or directory: '<name>.tmp' -> '<name>'" after its work was done.
    # Each now writes a temporary file of its own: the last to finish puts its whole file in place.
    # (Two threads: each os.open is its own open file, as another process's is.)
    path = tmp_path / "entry.json"
    errors = []

    def second():
        try:
            atomic_write_text(path, '{"who": "second"}')
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    other = threading.Thread(target=second)
    with atomic_open(path) as f:
        f.write('{"who": ')
        other.start()
        other.join(timeout=10)  # the second writer, started mid-write, finishes first
        assert not other.is_alive() and path.read_text() == '{"who": "second"}'
        f.write('"first", "pad": "' + "x" * 100 + '"}')
    assert not errors
    assert path.read_text() == '{"who": "first", "pad": "' + "x" * 100 + '"}'  # the last to finish: whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]


def test_a_writer_that_fails_leaves_the_waiting_writer_its_own_file(tmp_path, monkeypatch):
    # The first writer stopped mid-write (Ctrl-C, a full disk) gave back its flock, then removed '<name>.tmp' by name:
    # by then the waiting writer had taken that file as its own, so its file was removed under it and its rename
    # ended in "[Errno 2] No such file or directory". (The failing writer's removal is slowed by 0.2 s here, as a
    # busy machine's scheduler may; two threads, each os.open its own open file, as another process's is.)
    path = tmp_path / "report.md"
    unlink = Path.unlink

    def slow_unlink(self, *args, **kwargs):
        time.sleep(0.2)
        return unlink(self, *args, **kwargs)

    monkeypatch.setattr(Path, "unlink", slow_unlink)
    errors = []

    def second():
        try:
            with atomic_open(path) as f:
                f.write("second, whole")
                time.sleep(0.5)  # writing: longer than the first writer's removal takes
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    other = threading.Thread(target=second)
    with pytest.raises(KeyboardInterrupt):
        with atomic_open(path) as f:
            f.write("first, half")
            other.start()
            time.sleep(0.1)  # the second writer waits for this one's flock
            raise KeyboardInterrupt
    other.join(timeout=10)
    assert not errors and not other.is_alive(), errors
    assert path.read_text() == "second, whole"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.md"]


def test_a_stopped_writer_takes_back_its_own_files_not_those_another_wrote_into_the_folder(tmp_path):
    # Two longshort-eval-report into one new --out: the second finished ('wrote: out/report.md, out/summary.json,
    # out/ppl_vs_length.png', exit 0) while the first drew; the first, stopped then (SIGTERM, exit 143), took back
    # every report file new since it began, the second's whole report and the folder with them.
    out = tmp_path / "out"
    patterns = ("report.md", "summary.json", "own.png")

    def second():  # another process's whole report (a thread: its own undone_on_failure record)
        with undone_on_failure(out, patterns):
            atomic_write_text(out / "report.md", "second")
            atomic_write_text(out / "summary.json", "{}")

    with pytest.raises(KeyboardInterrupt):
        with undone_on_failure(out, patterns):
            atomic_write_text(out / "own.png", "first's")
            atomic_write_text(out / "report.md", "first's")  # replaced by the second's next
            other = threading.Thread(target=second)
            other.start()
            other.join(timeout=10)
            raise KeyboardInterrupt
    assert sorted(p.name for p in out.iterdir()) == ["report.md", "summary.json"]  # the first's own.png went
    assert (out / "report.md").read_text() == "second"
