"""plural.counted: the singular for exactly one, the plural for every other count (zero included, as English writes
"0 lengths"), and a plural given for a noun whose plural is not ``+ "s"``. References: the closed forms."""

import pytest

from torchtune_longshort.plural import counted


@pytest.mark.parametrize("n, said", [(0, "0 lengths"), (1, "1 length"), (2, "2 lengths"), (-1, "-1 lengths")])
def test_only_one_takes_the_singular(n, said):
    assert counted(n, "length") == said


def test_a_plural_given_is_the_one_used():
    assert counted(3, "entry", "entries") == "3 entries"
    assert counted(1, "entry", "entries") == "1 entry"
