"""A Ctrl-C that lands just after the BABILong generator put a file in place (its rename done, the write's
``with`` not yet left): the file is the run's own, so its name stays on the list of the files written there
(``.longshort_babilong.json``) and the rerun takes it. Were it taken off as a name never written, the rerun would
refuse the run's own rows ("which no earlier run there wrote"). The reference: the file on disk
(``os.path.isfile``) and the list read with ``json``."""

from __future__ import annotations

import json
import os

import pytest

from torchtune_longshort.eval.tasks.babilong import generator as gen


def test_a_stop_after_the_rename_keeps_the_written_files_name(tmp_path, monkeypatch):
    real = os.replace

    def replace_then_stop(src, dst, *args, **kwargs):
        real(src, dst, *args, **kwargs)
        if str(dst).endswith("qa1.jsonl"):
            raise KeyboardInterrupt

    out = tmp_path / "o"
    monkeypatch.setattr(os, "replace", replace_then_stop)
    with pytest.raises(KeyboardInterrupt):
        gen.generate(out, ["qa1"], ["0k"], n=1)
    monkeypatch.undo()
    assert os.path.isfile(out / "0k" / "qa1.jsonl")
    assert json.loads((out / gen.WRITTEN).read_text()) == ["0k/qa1.jsonl"]
    gen.generate(out, ["qa1"], ["0k"], n=1)  # the rerun takes its own file
    assert json.loads((out / gen.WRITTEN).read_text()) == ["0k/qa1.jsonl"]
