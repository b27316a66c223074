"""A BABILong generator killed with SIGKILL after it listed a file's name in ``.longshort_babilong.json`` and before
the file was in place left a listed name with no file: the next run took a file of the user's put at that name for
one of its own and overwrote it. The list now names a file once it is written. The reference: ``os.path.isfile`` of
each name the list holds, read with json, after a real SIGKILL of a forked generator the moment its list changes."""

from __future__ import annotations

import json
import os

import pytest
from killed_when import killed_when

from torchtune_longshort.eval.tasks.babilong import generator

ARGS = ["--out", "rows", "--lengths", "0k", "--qa", "qa1,qa2", "--n", "3000"]


def _listed(list_file: str) -> bool:
    with open(list_file) as f:
        return bool(json.load(f))


def _killed_once_listed(list_file: str) -> None:
    killed_when(lambda: generator.main(ARGS), lambda: _listed(list_file))


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
