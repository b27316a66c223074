"""``sweep_dataset``'s rows against its documented rules: a length the model cannot run (``fits`` refuses it) keeps
its rows, each carrying that reason (never sent, scored NaN), the other lengths' rows none; a length without data
gives one stand-in row per depth cell, and ``--limit N`` (lm-eval: the first N rows) of N cells reaches each."""

from __future__ import annotations

from torchtune_longshort.eval.tasks.common.pack_task import sweep_dataset
from torchtune_longshort.eval.tasks.common.unavailable import TaskDataError

ERROR = "error"  # the field the pack's rows carry a reason in (scored NaN with it)


def _rows(length):
    if length == 512:
        raise TaskDataError("no text")
    return [{"text": f"t{length}-{d}", "length": length, "depth": d} for d in (0, 50) for _ in range(2)]


def _stand_ins(length):
    return [{"text": " ", "length": length, "depth": d} for d in (0, 50)]


def _fits(length):
    if length > 128:
        raise TaskDataError(f"{length} tokens are past the model's 128")


def test_refused_lengths_keep_their_rows_with_the_reason_and_stand_ins_cover_each_depth():
    test = sweep_dataset("mytask", [128, 256, 512], _rows, _stand_ins, fits=_fits)["test"].to_list()
    assert len(test) == 4 + 4 + 2
    by_length = {n: [r for r in test if r["length"] == n] for n in (128, 256, 512)}
    assert all(r[ERROR] == "" for r in by_length[128])
    assert all("256 tokens are past the model's 128" in r[ERROR] and "mytask" in r[ERROR] for r in by_length[256])
    assert all("no text" in r[ERROR] for r in by_length[512])
    cells = {(r["length"], r["depth"]) for r in test}
    assert {(r["length"], r["depth"]) for r in test[: len(cells)]} == cells  # --limit 6 reaches all 6 cells
