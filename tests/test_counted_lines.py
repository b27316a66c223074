"""Lines that print a count say it in English: one noun singular, others plural ("removed 1 temporary folder(s) a
killed process left", "1 task(s) raised and are NaN" before). Each line is built for a count of 1 and of 2 and
compared with the sentence as written out by hand."""

import pytest

from torchtune_longshort.eval.task_faults import TaskFaults
from torchtune_longshort.made_folders import remove_abandoned


@pytest.mark.parametrize("count, said", [
    (1, "removed 1 temporary folder a killed process left beside"),
    (2, "removed 2 temporary folders a killed process left beside"),
])
def test_removed_temporary_folders_are_counted(tmp_path, capsys, count, said):
    for i in range(count):
        (tmp_path / f".model.converting_{i}").mkdir()
    remove_abandoned(tmp_path / "model", "converting", 0)
    assert capsys.readouterr().err.startswith(f"{said} {tmp_path / 'model'} ("), said
    assert not any(tmp_path.iterdir())


@pytest.mark.parametrize("count, said", [(1, "1 task raised and is NaN: "), (2, "2 tasks raised and are NaN: ")])
def test_raised_tasks_are_counted_with_their_verb(count, said):
    faults = TaskFaults()
    faults.reasons = {f"t{i}": f"t{i}: boom" for i in range(count)}
    assert faults.closing_line().startswith(said), faults.closing_line()
