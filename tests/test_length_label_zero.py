"""``length_label(0)`` is ``"0k"``: the name lm-eval's own BABILong task gives its empty-haystack length (the
``dataset_name`` of its qa6-qa20 YAMLs), which the task pack's rows, folders and metric keys share. Hand mutation
testing found it unasked: labelling 0 as plain ``"0"`` passed every other test."""

from __future__ import annotations

import re
from pathlib import Path

import lm_eval

from torchtune_longshort.lengths import length_label, parse_length

BABILONG = Path(lm_eval.__file__).parent / "tasks" / "babilong"


def test_zero_is_labelled_as_lm_evals_babilong_names_it():
    names = {m.group(1) for f in BABILONG.glob("babilong_qa*.yaml")
             for m in [re.search(r"^dataset_name:\s*(\S+)\s*$", f.read_text(), re.M)] if m}
    assert len(names) == 1  # one length: the empty haystack
    (empty,) = names
    assert length_label(0) == empty
    assert parse_length(empty) == 0
