"""A BABILong generator killed with SIGKILL while it wrote ``rows/0k/qa1.jsonl`` left its hidden
``rows/0k/.qa1.jsonl.partial`` (megabytes) for good: only a later run writing that same file replaced it. Now a later
run into the same ``--out`` removes the partial files a killed run left there, with one line, and no other file. The
reference: ``os.path.lexists`` of each file after a real SIGKILL of a forked generator the moment its partial file
holds rows, and a rerun that writes another task."""

from __future__ import annotations

import os

from killed_when import killed_when

from torchtune_longshort.eval.tasks.babilong import generator

PART = os.path.join("rows", "0k", ".qa1.jsonl.partial")


def _killed_while_writing() -> None:
    killed_when(lambda: generator.main(["--out", "rows", "--lengths", "0k", "--qa", "qa1", "--n", "200000"]),
                lambda: os.path.isfile(PART) and os.path.getsize(PART) > 0)


def test_a_killed_generators_partial_file_is_removed_by_the_next_run_there(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _killed_while_writing()
    assert os.path.isfile(PART)
    users = [os.path.join("rows", "mine", ".qa1.jsonl.partial"), os.path.join("rows", "0k", ".qa9.jsonl.partial"),
             os.path.join("other", "0k", ".qa1.jsonl.partial")]  # not where the generator writes its partial files
    for path in users:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write("the user's\n")
    capsys.readouterr()
    generator.main(["--out", "rows", "--lengths", "0k", "--qa", "qa2", "--n", "1"])
    assert not os.path.lexists(PART)
    lines = [line for line in capsys.readouterr().err.splitlines() if "partial" in line]
    assert len(lines) == 1 and "0k/.qa1.jsonl.partial" in lines[0], lines
    assert "removed 1 partial file a killed run" in lines[0], lines  # one file: no "(s)"
    generator.main(["--out", "other", "--lengths", "0k", "--qa", "qa2", "--n", "1"])  # no run of ours left it
    for path in users:
        with open(path) as f:
            assert f.read() == "the user's\n"


def test_a_live_writers_partial_file_stays(tmp_path, monkeypatch):
    import fcntl

    from torchtune_longshort.eval.tasks.babilong.partials import remove_killed_partials

    (tmp_path / "0k").mkdir()
    (tmp_path / generator.WRITTEN).write_text("[]\n")
    part = tmp_path / "0k" / ".qa1.jsonl.partial"
    part.write_text("rows so far\n")
    with open(part) as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # as the generator writing it holds it
        assert remove_killed_partials(tmp_path, ["0k"], ["qa1"], tmp_path / generator.WRITTEN) == []
    assert part.is_file()
    assert remove_killed_partials(tmp_path, ["0k"], ["qa1"], tmp_path / generator.WRITTEN) == ["0k/.qa1.jsonl.partial"]
    assert not os.path.lexists(part)

