"""A claim's verdict over its paired comparisons' directions, at the mixes test_study_claims.py's planted studies
never give: better at one length and worse at another, and no interval anywhere. The rule, as claims.claim_alpha
writes it into every report: "better than CE ... at one or more lengths >= L and worse at none". Hand mutants
(mutants36) dropping 'and worse at none' or the all-'unknown' case passed test_study_claims.py."""

from torchtune_longshort.study.comparisons import verdict_from


def test_better_at_one_length_and_worse_at_another_is_not_held():
    verdict, reason = verdict_from(["better", "no difference", "worse"], "better")
    assert verdict == "not held" and "worse than CE at 1 of 3 points" in reason


def test_no_interval_anywhere_is_not_measurable():
    # every comparison with fewer than 2 seeds (direction "unknown"): nothing measured, not "every interval holds 0"
    assert verdict_from(["unknown", "unknown"], "better")[0] == "not measurable here"
    assert verdict_from(["unknown", "better"], "better")[0] == "held"
