"""Table 1's one-word answer from its per-length verdicts, at the mixes test_study_table1.py's records never give
(their one headline is "does not hold": passkey contradicts at one length). Each case a hand mutant (mutants38) of
study/table1/analysis.py's headline() that passed it; the reference is docs/study/table1.md's rule:

    The headline: `holds` (perplexity held at every length and no figure contradicts it), `holds for perplexity`
    (passkey did not follow), `holds at some lengths`, `not shown`, `does not hold` (a figure contradicts it) or
    `not measurable`.

and the module doc's "not measurable when no perplexity correlation could be computed"."""

import pytest

from torchtune_longshort.study.table1.analysis import PREDICTORS, TARGETS, headline

NM = "not measurable"


def _per_length(*lengths):
    """``per_length`` entries from ``{target: the metric's verdict}`` per length (the reference predictors' rho
    undefined, so no "for reference" line)."""
    out = {}
    for i, verdicts in enumerate(lengths):
        corrs = [{"predictor": p, "target": t, "spearman": None,
                  "verdict": verdicts.get(t, NM) if p == "sce" else NM, "why": "hand-made"}
                 for p in PREDICTORS for t in TARGETS]
        out[str(1024 * (i + 1))] = {"label": f"{i + 1}k", "correlations": corrs}
    return out


@pytest.mark.parametrize("lengths, want", [
    # mutant dropping the 'not measurable' filter on perplexity: a length with too few variants made "held at
    # every length" false ("holds at some lengths")
    (({"ppl": "held", "passkey": "held"}, {"ppl": NM, "passkey": "held"}), "holds"),
    # mutant 'all(...)' without 'others and': no passkey figure measured at all read as passkey following
    (({"ppl": "held"}, {"ppl": "held"}), "holds for perplexity"),
    (({"ppl": "held", "passkey": "same direction, not significant"},), "holds for perplexity"),
    # mutant 'any(v == "held" for v in ppl)' in the 'held at every length' test
    (({"ppl": "held", "passkey": "held"}, {"ppl": "same direction, not significant", "passkey": "held"}),
     "holds at some lengths"),
    # mutant 'all' for 'any' in 'holds at some lengths': one length of two was "not shown"
    (({"ppl": "opposite direction, not significant"}, {"ppl": "held"}), "holds at some lengths"),
    (({"ppl": "same direction, not significant"}, {"ppl": "opposite direction, not significant"}), "not shown"),
    # mutant reading 'contradicted' in perplexity only: digits in place contradicting it was "holds"
    (({"ppl": "held", "passkey": "held", "passkey_digits": "contradicted"},), "does not hold"),
    # mutant 'if not ppl + others': passkey measurable, perplexity not at any length
    (({"ppl": NM, "passkey": "held"},), "not measurable"),
])
def test_the_headline_word_follows_the_documented_rule(lengths, want):
    got = headline(_per_length(*lengths))
    assert got["verdict"] == want, got
    assert got["by_target"]["ppl"] == [v.get("ppl", NM) for v in lengths]
