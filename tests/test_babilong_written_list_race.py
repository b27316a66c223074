"""Two BABILong generators on one --out: each read the list of the files written there (.longshort_babilong.json),
added its name and wrote the list back, with nothing between the read and the write; the second's write dropped the
first's name (whose file a rerun then refused as written by no earlier run). The two updates are interleaved by
hand here (the first holds its read until the second has written, or for a second where the second must wait), and
both names must be in the list, read with json (the reference)."""

from __future__ import annotations

import json
import threading

import torchtune_longshort.eval.tasks.babilong.generator as gen


def test_two_updates_of_the_written_list_at_once_keep_both_names(tmp_path, monkeypatch):
    read = gen._written
    first_read, second_done = threading.Event(), threading.Event()

    def held_read(out):  # the first update reads, then waits for the second to write (or to be kept waiting)
        have = read(out)
        if threading.current_thread().name == "first":
            first_read.set()
            second_done.wait(1.0)
        return have

    monkeypatch.setattr(gen, "_written", held_read)

    def second():
        first_read.wait(5.0)
        gen._record(tmp_path, "2k/qa1.jsonl")
        second_done.set()

    threads = [threading.Thread(target=gen._record, args=(tmp_path, "1k/qa1.jsonl"), name="first"),
               threading.Thread(target=second, name="second")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10.0)
    assert sorted(json.loads((tmp_path / gen.WRITTEN).read_text())) == ["1k/qa1.jsonl", "2k/qa1.jsonl"]
