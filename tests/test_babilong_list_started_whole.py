"""A BABILong generator killed (SIGKILL) while it wrote its first file left ``.longshort_babilong.json`` empty: 0
bytes, no JSON, where every other record the project writes is whole or absent. The list is now written whole
(``[]``) and linked into place (``output_guard.start_names``). The reference: ``json.load`` of the list after a real
SIGKILL of a forked generator the moment the list exists."""

from __future__ import annotations

import json
import os

from test_babilong_written_list_killed import ARGS

from torchtune_longshort.eval.tasks.babilong import generator


def test_a_generator_killed_before_it_listed_a_file_leaves_a_whole_list(tmp_path, monkeypatch):
    import signal
    import time

    monkeypatch.chdir(tmp_path)
    listed = os.path.join("rows", generator.WRITTEN)
    pid = os.fork()
    if pid == 0:  # the generator, killed below the moment its list exists: no Python cleanup runs in it
        try:
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            generator.main(ARGS)
        finally:
            os._exit(0)
    deadline = time.monotonic() + 10
    while not os.path.lexists(listed) and time.monotonic() < deadline:
        time.sleep(0.0005)
    os.kill(pid, signal.SIGKILL)
    _, status = os.waitpid(pid, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL, status
    with open(listed) as f:
        assert json.load(f) == []  # killed before its first file was written whole: listed none, and said so in JSON
