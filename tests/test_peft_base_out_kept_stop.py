"""``longshort-eval peft-base STEP --out DIR`` into the user's existing empty folder, stopped (Ctrl-C) while it moves
the files in from the folder it built aside: the files it had already moved are taken out again, the folder aside is
removed, and the user's folder itself stays, empty, the same folder (``os.stat``, ``os.listdir``: the references)."""

from __future__ import annotations

import os

import pytest

pytest.importorskip("peft")

from test_peft_adapter_other_step import yarn_run  # noqa: E402
from test_peft_base_folder import PROG  # noqa: E402

from torchtune_longshort.eval.peft_base import main  # noqa: E402


def test_a_stop_while_moving_into_a_kept_folder_leaves_it_empty(tmp_path, monkeypatch, capsys):
    _, _, step3 = yarn_run(tmp_path)
    out = tmp_path / "mine"
    out.mkdir()
    before = os.stat(out)
    real, calls = os.rename, []

    def rename_then_stop(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        calls.append(dst)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(os, "rename", rename_then_stop)
    with pytest.raises(KeyboardInterrupt):
        main([str(step3), "--out", str(out)], PROG)
    monkeypatch.undo()
    assert len(calls) == 2 and all(os.path.dirname(c) == str(out) for c in calls)  # two files were moved in
    assert os.listdir(out) == []
    after = os.stat(out)
    assert (after.st_ino, after.st_dev) == (before.st_ino, before.st_dev)
    assert sorted(os.listdir(tmp_path)) == sorted(["base", "run", "mine"])  # nothing aside left
