"""A BABILong generator killed (SIGKILL) while it wrote its first file left ``.longshort_babilong.json`` empty: 0
bytes, no JSON, where every other record the project writes is whole or absent. The list is now written whole
(``[]``) and linked into place (``output_guard.start_names``). The reference: ``json.load`` of the list after a real
SIGKILL of a forked generator the moment the list exists."""

from __future__ import annotations

import json
import os

from killed_when import killed_when
from test_babilong_written_list_killed import ARGS

from torchtune_longshort.eval.tasks.babilong import generator


def test_a_generator_killed_before_it_listed_a_file_leaves_a_whole_list(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    listed = os.path.join("rows", generator.WRITTEN)
    killed_when(lambda: generator.main(ARGS), lambda: os.path.lexists(listed))  # the moment its list exists
    with open(listed) as f:
        assert json.load(f) == []  # killed before its first file was written whole: listed none, and said so in JSON
