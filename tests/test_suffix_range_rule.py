"""The misalignment task's suffix range at each length, as README.md states it (``mis_min_frac`` / ``mis_max_frac``:
"``max(1, floor(f * L))``"), and always one ``misalignment_metric`` accepts (its own check: ``1 <= min_len <=
max_len``): a fraction so small that ``f * L < 1`` still gives one token, equal fractions give one length, and the
decimal as written counts (``0.29 * 100`` is 29 tokens, though the float 0.29 is a little less)."""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

from torchtune_longshort.eval.tasks.common.suffix_range import suffix_range

README = (Path(__file__).resolve().parents[1] / "README.md").read_text()


@pytest.mark.parametrize("low, high, length", [("0.001", "0.5", 100), ("0.5", "0.5", 64), ("0.3", "0.3", 7),
                                               ("0.25", "1", 3), ("0.29", "0.57", 100), (0.29, 0.57, 100)])
def test_suffix_range_follows_the_readme_rule_and_the_metrics_check(low, high, length):
    assert "`max(1, floor(f * L))`" in README  # the rule quoted below
    expected = tuple(max(1, math.floor(Fraction(str(f)) * length)) for f in (low, high))
    got = suffix_range({"mis_min_frac": low, "mis_max_frac": high}, length)
    assert got == expected
    assert 1 <= got[0] <= got[1]  # what misalignment_metric asks of min_len / max_len
