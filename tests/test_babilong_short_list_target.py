"""BABILong's answer check on a 3-character target with a comma: one label, not a list of sub-targets.

A hand mutant of babilong.task.compare_answers splitting a target at its comma from 3 characters (``>= 3``, where
BABILong's ``babilong/metrics.py`` has ``len(target) > 3``) survived test_babilong_answers, _scores and test_babilong
(mutants27): the pack's QA1-QA5 have no comma in a label. ``compare_answers`` takes any label set; BABILong's QA19
(path finding) labels are such targets (``"n,w"``), and the official check scores ``"n,w"`` right. The reference is
``ref_compare_answers`` (test_babilong_answers, written from booydar/babilong's ``compare_answers``), the labels
BABILong's ``TASK_LABELS['qa19']``.
"""

from __future__ import annotations

import pytest

from test_babilong_answers import ref_compare_answers
from torchtune_longshort.eval.tasks.babilong.task import compare_answers

QA19_LABELS = ["e,e", "e,n", "e,s", "n,e", "n,n", "n,w", "s,e", "s,s", "s,w", "w,n", "w,s", "w,w"]


@pytest.mark.parametrize("target, output, want", [
    ("n,w", "n,w", True),                # the one label, whole
    ("n,w", "N,W.", True),               # case and the first sentence
    ("n,w", "w,n", False),               # another label
    ("s,s", "s,s then e,e", False),      # two labels
])
def test_a_three_character_target_is_one_label(target, output, want):
    question = "How do you go from the kitchen to the garden?"
    assert ref_compare_answers(target, output, question, QA19_LABELS) is want
    assert compare_answers(target, output, question, QA19_LABELS) is want
