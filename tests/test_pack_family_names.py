"""Which of the pack's families a task name belongs to (``eval.report.one_run.pack_family``): the family's task or a
member named ``<task>_...``, as the pack's own YAMLs name them; a user's task that only starts with the same letters
(``longshort_ppl2``, declared by no YAML of the pack) is none of the pack's, so the report does not compare it by the
pack's ``--metadata`` keys. Hand mutation testing found it unasked: dropping the ``_`` passed every other test."""

from __future__ import annotations

import re

from torchtune_longshort.eval.report.one_run import pack_family
from torchtune_longshort.eval.tasks import TASK_FAMILIES, tasks_path


def _declared():
    """``{name: folder}`` of every ``task:`` / ``group:`` name the pack's YAMLs declare."""
    return {m.group(2): f.parent.name for f in tasks_path().glob("*/*.yaml")
            for m in re.finditer(r"^(task|group):[ \t]*(\S+)[ \t]*$", f.read_text(), re.M)}


def test_a_name_is_the_family_of_the_folder_declaring_it_and_a_look_alike_is_none():
    declared = _declared()
    for fam in TASK_FAMILIES.values():
        assert declared[fam.task] == fam.folder
        members = [n for n, folder in declared.items() if n.startswith(fam.task + "_")]
        assert all(pack_family(n) is fam for n in members + [fam.task])
        look_alike = fam.task + "2"
        assert look_alike not in declared
        assert pack_family(look_alike) is None
