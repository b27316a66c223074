"""passkey's haystack_units stops at max_units lines of a corpus, as the filler does.

A hand mutant reading one line past max_units (``len(units) > max_units``) survived test_passkey and
test_passkey_messages (mutants11): a local haystack then gave max_units + 1 units where the filler gives max_units.
The reference: the file's non-blank lines, stripped, written out by hand.
"""

from __future__ import annotations

import pytest

from torchtune_longshort.eval.tasks.passkey.task import haystack_units

LINES = ["one", "two", "three", "four", "five"]


@pytest.mark.parametrize("cap", [1, 3, 5])
def test_a_local_haystack_stops_at_max_units_lines(tmp_path, cap):
    path = tmp_path / "hay.txt"
    path.write_text("one\n\n  two  \nthree\nfour\nfive\n")
    assert haystack_units("local", str(path), max_units=cap) == LINES[:cap]
    assert len(haystack_units(max_units=cap)) == cap  # the filler, alike
