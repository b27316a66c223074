"""The "did you mean" of config/unknown_keys.py is difflib's nearest known key at difflib's own default cutoff
(mutants42: a cutoff of 0.5 or 0.7 survived the tests). Reference: difflib.get_close_matches with its defaults."""

import difflib

import pytest

from torchtune_longshort.config.unknown_keys import hint

# (typed key, known keys): ratios 0.67 (batch/batch_size), 0.6 exactly (seq/seq_len), 0.55 (seq/seq_lens), 0.94
CASES = [("batch", ["batch_size", "device"]), ("seq", ["seq_len", "dtype"]), ("seq", ["seq_lens", "dtype"]),
         ("max_step", ["max_steps", "seed"])]


@pytest.mark.parametrize("key, known", CASES)
def test_did_you_mean_is_difflibs_nearest_at_its_default_cutoff(key, known):
    near = difflib.get_close_matches(key, known)
    want = f"'loss.{key}'" + (f" (did you mean {near[0]!r}?)" if near else "")
    assert hint(key, known, where="loss") == want


def test_the_cases_sit_on_both_sides_of_the_cutoff():
    assert [bool(difflib.get_close_matches(k, known)) for k, known in CASES] == [True, True, False, True]
