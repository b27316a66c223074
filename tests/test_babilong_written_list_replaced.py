"""The BABILong generator lists a file's name (``.longshort_babilong.json``) only when the file at that name is the
one it wrote: a file put in its place between the rename and the listing (another process's) is not vouched for, so
a rerun never overwrites it as its own. And a Ctrl-C during a write leaves an earlier run's file and its listing as
they were, the KeyboardInterrupt itself raised. References: ``os.stat`` of the files, the list read with ``json``."""

from __future__ import annotations

import json
import os

import pytest

from torchtune_longshort.eval.tasks.babilong import generator as gen


def test_a_file_put_in_place_of_the_written_one_is_not_listed(tmp_path, monkeypatch):
    real = os.replace
    theirs = tmp_path / "theirs.jsonl"
    theirs.write_text('{"theirs": 1}\n')
    mine = []

    def replace_then_swapped(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if str(dst).endswith("qa1.jsonl"):
            mine.append(os.stat(dst))
            real(theirs, dst)  # another process's file, put at the name just after the run's rename

    out = tmp_path / "o"
    monkeypatch.setattr(os, "replace", replace_then_swapped)
    gen.generate(out, ["qa1"], ["0k"], n=1)
    monkeypatch.undo()
    assert mine and not os.path.samestat(mine[0], os.stat(out / "0k" / "qa1.jsonl"))
    assert (out / "0k" / "qa1.jsonl").read_text() == '{"theirs": 1}\n'
    listed = out / gen.WRITTEN
    assert "0k/qa1.jsonl" not in json.loads((listed.read_text() if listed.exists() else "") or "[]")  # empty: none


def test_a_stop_during_a_rewrite_keeps_the_earlier_file_and_its_listing(tmp_path, monkeypatch):
    out = tmp_path / "o"
    gen.generate(out, ["qa1"], ["0k"], n=1)
    before = os.stat(out / "0k" / "qa1.jsonl")

    def stop(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(gen, "build_sample", stop)
    with pytest.raises(KeyboardInterrupt):
        gen.generate(out, ["qa1"], ["0k"], n=1)
    monkeypatch.undo()
    assert os.path.samestat(before, os.stat(out / "0k" / "qa1.jsonl"))
    assert json.loads((out / gen.WRITTEN).read_text()) == ["0k/qa1.jsonl"]
