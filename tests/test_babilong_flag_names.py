"""The BABILong generator's command names an unknown ``--qa`` or ``--lengths`` name by its flag, as its other refusals
do (it said "qa='qa6' is not supported" and "length='3k' is not a BABILong length", generate()'s argument names, which
no user typed), in one line, exit 2, nothing written."""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.tasks.babilong import generator as gen


@pytest.mark.parametrize("flags, line", [
    (["--qa", "qa6", "--lengths", "0k"], "--qa qa6: qa6 is not a task the generator writes; accepted: qa1, qa2, qa3, "
     "qa4, qa5\n"),
    (["--qa", "qa1, QA2", "--lengths", "0k"], "--qa qa1,QA2: QA2 is not a task the generator writes; accepted: "),
    (["--lengths", "1k, 3k"], "--lengths 1k,3k: 3k is not a BABILong length; accepted: 0k, 1k, 2k, 4k, 8k, 16k, 32k, "
     "64k, 128k\n"),
], ids=["qa6", "QA2", "3k"])
def test_an_unknown_qa_or_length_is_named_by_its_flag(tmp_path, capsys, flags, line):
    with pytest.raises(SystemExit) as exit_info:
        gen.main(["--out", str(tmp_path / "out")] + flags)
    err = capsys.readouterr().err
    assert exit_info.value.code == 2 and err.count("\n") == 1 and f"error: {line}" in err, err
    assert "=" not in err and list(tmp_path.iterdir()) == []
