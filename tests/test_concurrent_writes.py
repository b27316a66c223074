"""Two processes writing one shared file at once (a sweep's two terminals sharing a synthetic --cache, two
evaluations into one --output_path): each file in place is one writer's whole file, and neither writer fails."""

import threading

from torchtune_longshort.output_guard import atomic_open, atomic_write_text


def test_a_second_writer_of_the_same_file_waits_for_the_first_and_neither_is_cut(tmp_path):
    # Both wrote through the one temporary file '<name>.tmp': the second truncated and rewrote the first's, the first
    # then moved the second's half-written file into place (a cache entry a later run trusted) and the second's own
    # os.replace ended in "[Errno 2] No such file or directory: '<name>.tmp' -> '<name>'" after its work was done.
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
        other.join(timeout=0.5)  # the second writer, started mid-write: it waits for this one's file to be in place
        assert other.is_alive(), "the second writer did not wait for the first"
        f.write('"first", "pad": "' + "x" * 100 + '"}')
    other.join(timeout=10)
    assert not errors and not other.is_alive()
    assert path.read_text() == '{"who": "second"}'  # the later writer's whole file
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]


def test_a_temporary_file_a_killed_writer_left_is_written_over(tmp_path):
    path = tmp_path / "entry.json"
    (tmp_path / "entry.json.tmp").write_text('{"half')  # a writer killed -9 mid-write: no one holds it
    atomic_write_text(path, "whole")
    assert path.read_text() == "whole" and sorted(p.name for p in tmp_path.iterdir()) == ["entry.json"]
