"""A BABILong generator killed with SIGKILL after it listed a file's name in ``.longshort_babilong.json`` and before
the file was in place left a listed name with no file: the next run took a file of the user's put at that name for
one of its own and overwrote it. The list now names a file once it is written. The reference: ``os.path.isfile`` of
each name the list holds, read with json, after a real SIGKILL of a forked generator the moment its list changes."""

from __future__ import annotations

import json
import os
import signal
import time

import pytest

from torchtune_longshort.eval.tasks.babilong import generator

ARGS = ["--out", "rows", "--lengths", "0k", "--qa", "qa1,qa2", "--n", "3000"]


def _killed_once_listed(list_file: str) -> None:
    pid = os.fork()
    if pid == 0:  # the generator, killed below: no Python cleanup runs in it
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            generator.main(ARGS)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            with open(list_file) as f:
                if json.load(f):
                    break
        except (OSError, ValueError):
            pass
        time.sleep(0.001)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status


def test_a_killed_generator_lists_no_file_it_did_not_write(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    _killed_once_listed(os.path.join("rows", generator.WRITTEN))
    with open(os.path.join("rows", generator.WRITTEN)) as f:
        listed = json.load(f)
    assert listed and [n for n in listed if not os.path.isfile(os.path.join("rows", n))] == []
    missing = [n for n in ("0k/qa1.jsonl", "0k/qa2.jsonl") if not os.path.isfile(os.path.join("rows", n))]
    for name in missing:  # the user's own files, put where the killed run wrote none
        with open(os.path.join("rows", name), "w") as f:
            f.write("the user's rows\n")
    with pytest.raises(SystemExit) as e:
        generator.main(ARGS[:-1] + ["1"])
    assert e.value.code == 2 and len(capsys.readouterr().err.strip().splitlines()) == 1
    for name in missing:
        with open(os.path.join("rows", name)) as f:
            assert f.read() == "the user's rows\n"
