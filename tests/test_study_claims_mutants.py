"""The claims' verdict words at the mixes test_study_claims.py's planted study never gives, each a hand mutant
(mutants38) of study/claims.py that passed it: its BABILong scores are 0 everywhere (Tables 4-5 "not measurable
here" before any depth is read), its one method is held (the per-method combination never mixes), and its e-range
variants go the paper's way for one range of three ("partly held" only). Here on hand-made records, each paired
interval checked against scipy's paired t interval, each verdict against the rule the report prints."""

from types import SimpleNamespace as NS

import pytest
from scipy import stats

from torchtune_longshort.study.claims import _combined, claim_babilong, claim_e_range
from torchtune_longshort.study.eval_config import metric_of
from torchtune_longshort.study.grid import config_key
from torchtune_longshort.windows import resolve_e_range

SEEDS = [0, 1, 2]
JITTER = [0.0, 0.01, -0.01]  # per seed, so that no interval is degenerate (equal differences: the sign-flip test)
DEPTHS = [0, 25, 50, 75]
BAB_RULE = "held when alpha 0.1-0.3 is better than CE at depth 50-75% and not different at depth 0"


def _scipy_direction(diffs, lower_is_better):
    lo, hi = stats.ttest_1samp(diffs, 0.0).confidence_interval(0.95)  # the paired t interval of treated - control
    if lo <= 0 <= hi:
        return "no difference"
    return "better" if (hi < 0) == lower_is_better else "worse"


def _checked(claim, lower_is_better):
    """``claim`` after each comparison's direction is checked against scipy's paired t interval on its values."""
    for c in claim["comparisons"]:
        assert c["seeds"] == SEEDS and c["direction"] == _scipy_direction(c["values"], lower_is_better), c
    return claim


def _babilong(effect, lengths=("1k", "2k"), flat=()):
    """A one-method study with BABILong accuracy at every (length, depth); ``effect(alpha, label, depth)``: alpha's
    planted gain over CE (alpha 0) there; the depths in ``flat`` score 0.5 in every run (no signal)."""
    alphas = [0, 0.1, 0.3]
    grid = [NS(config=config_key("pi", a), alpha=a, seed=s, key=f"{config_key('pi', a)}_s{s}")
            for a in alphas for s in SEEDS]
    cfg = NS(methods=["pi"], alphas=alphas, grid=grid,
             eval=NS(babilong=NS(depths=DEPTHS), babilong_lengths=list(lengths)))
    recs = {}
    for r in grid:
        res = {}
        for lab in lengths:
            for d in DEPTHS:
                task, metric = metric_of("babilong", f"{lab}_d{d}")
                acc = 0.5 if d in flat else 0.3 + 0.05 * r.seed + (effect(r.alpha, lab, d) + JITTER[r.seed]) * (
                    r.alpha > 0)
                res.setdefault(task, {})[metric] = acc
        recs[r.key] = {"status": "ok", "results": res}
    return _checked(claim_babilong(cfg, recs), lower_is_better=False)


def test_babilong_is_judged_at_the_longest_length():
    # mutant 'longest = labs[0]': read 1k, where nothing differs; the paper: "BABILong improves at 8k and 16k"
    got = _babilong(lambda a, lab, d: 0.2 if lab == "2k" and d in (50, 75) else 0.0, flat=(25,))
    assert {c["length"] for c in got["comparisons"]} == {f"2k_d{d}" for d in DEPTHS}
    assert got["rule"] == BAB_RULE and got["verdict"] == "held", got["reason"]


def test_one_depth_with_no_signal_does_not_make_the_claim_unmeasurable():
    # mutant 'not all(has_signal ...)': depth 25 scores 0.5 in every run, and the whole claim was "not measurable"
    got = _babilong(lambda a, lab, d: 0.2 if d == 50 else 0.0, flat=(25,))
    assert got["verdict"] == "held", got["reason"]


def test_better_at_depth_75_alone_is_better_at_depth_50_75():
    # mutant 'in (50,)': depth 75 left out of "depth 50-75%", where the gain is
    got = _babilong(lambda a, lab, d: 0.2 if d == 75 else 0.0)
    assert got["verdict"] == "held", got["reason"]


def test_better_at_depth_25_only_is_not_the_papers_depths():
    # mutant 'in (25, 50, 75)' (or '>= 25'): a gain at depth 25 read as the paper's 50-75%
    got = _babilong(lambda a, lab, d: 0.2 if d == 25 else 0.0)
    assert got["verdict"] == "not held" and got["reason"].startswith("depth 50-75%: every 95% interval holds 0")


@pytest.mark.parametrize("differs_at_0", [(0.1, 0.3), (0.3,)])
def test_a_difference_at_depth_0_is_not_held(differs_at_0):
    # mutant dropping 'and same0': the paper's "equals CE at depth 0" was not asked; mutant 'same0 = any(...)':
    # alpha 0.1 equal to CE at depth 0 hid alpha 0.3's difference there
    got = _babilong(lambda a, lab, d: 0.2 if d in (50, 75) or (d == 0 and a in differs_at_0) else 0.0)
    assert got["verdict"] == "not held" and got["reason"].endswith("depth 0: differs from CE"), got["reason"]


def test_alpha_0_3_worse_at_depth_50_75_is_not_held():
    # mutant 'for a in (0.1,)': Tables 4-5 are about alpha 0.1-0.3; alpha 0.3 worse than CE (at depths 50 and 75 of
    # the 4 depth-50-75% points) was not read
    got = _babilong(lambda a, lab, d: (0.2 if a == 0.1 else -0.2) if d in (50, 75) else 0.0)
    assert {c["treated"] for c in got["comparisons"]} == {"pi_a0.1", "pi_a0.3"}
    assert got["verdict"] == "not held" and "worse than CE at 2 of 4 points" in got["reason"], got["reason"]


@pytest.mark.parametrize("verdicts, want", [
    (["held", "not held"], "held for some methods only"),
    (["held", "not measurable here", "held"], "held"),  # held wherever it is measurable
    (["not held", "not measurable here"], "not held"),
    (["not measurable here", "not measurable here"], "not measurable here"),
])
def test_the_methods_verdicts_combine_by_the_measurable_ones(verdicts, want):
    # mutants 'any(v == "held")' and dropping '"held" in measurable': one method held and another not was "held"
    # or "not held"; the words, as the report prints them per claim
    assert _combined(verdicts) == want


def _e_range(diffs, ranges=None):
    """Table 7 on hand-made perplexities: ``diffs[(lo, hi)]``: that range's planted ppl over the main range's at
    every long length, or None for a range run with one seed (no interval); ``ranges``: the three ranges spelled
    another way (the planted values stay keyed by the paper's spelling, in the same order)."""
    paper = [[1, "L/4"], ["L/4", "L/2"], [1, "L"]]
    tags = ["e1-L_4", "eL_4-L_2", "e1-L"]
    grid = [NS(config="pi_a0.1", variant=None, seed=s, key=f"pi_a0.1_s{s}", overrides={}) for s in SEEDS]
    planted = {}
    for rng, p, tag in zip(ranges or paper, paper, tags):
        planted[f"pi_a0.1_{tag}"] = diffs[tuple(p)]
        grid += [NS(config=f"pi_a0.1_{tag}", variant="e_range", seed=s, key=f"pi_a0.1_{tag}_s{s}",
                    overrides={"e_range": rng}) for s in SEEDS]
    cfg = NS(L=256, seeds=SEEDS, grid=grid, eval=NS(ppl_lengths=[128, 256, 512]),
             variants=NS(e_range=NS(method="pi", alpha=0.1)))
    recs = {}
    for r in grid:
        d = planted[r.config] if r.variant else 0.0
        if d is None and r.seed > 0:
            continue
        res = {}
        for n in cfg.eval.ppl_lengths:
            task, metric = metric_of("ppl", n)
            res.setdefault(task, {})[metric] = 10 + r.seed + (d or 0.0) + (JITTER[r.seed] if r.variant else 0.0)
        recs[r.key] = {"status": "ok", "results": res}
    got = claim_e_range(cfg, recs, [1, "L/2"])  # the main grid's range: the paper's
    known = {**got, "comparisons": [c for c in got["comparisons"] if c["direction"] != "unknown"]}
    return _checked(known, lower_is_better=True) and got


def test_no_range_going_the_papers_way_is_not_held():
    # mutant '"partly held" if held': a list of False read as some held. The rule: "U[1, L/4]: no difference;
    # U[L/4, L/2] and U[1, L]: worse perplexity"; here the first is worse and the other two better
    got = _e_range({(1, "L/4"): 1.0, ("L/4", "L/2"): -1.0, (1, "L"): -1.0})
    assert [c["direction"] for c in got["comparisons"]] == ["worse"] * 2 + ["better"] * 4
    assert got["verdict"] == "not held" and got["reason"].startswith("0 of 6 ")


def test_a_range_without_an_interval_is_left_out_not_counted_against():
    # mutant dropping 'direction != "unknown"': U[1, L], run with one seed, counted as not the paper's way
    got = _e_range({(1, "L/4"): 0.0, ("L/4", "L/2"): 1.0, (1, "L"): None})
    assert [c["direction"] for c in got["comparisons"]] == ["no difference"] * 2 + ["worse"] * 2 + ["unknown"] * 2
    assert got["verdict"] == "held" and got["reason"].startswith("4 of 4 ")


@pytest.mark.parametrize("spelled", [
    [[1, 64], [64, 128], [1, 256]],              # the numbers L/4, L/2 and L stand for at L = 256
    [["1", "L / 4"], ["0.25L", "2*L/4"], [1, "1*L"]],  # other spellings of the same expressions
])
def test_a_range_spelled_another_way_gets_the_papers_expectation(spelled):
    # Table 7's expectations were keyed by the bounds as written ("1", "L/4"): [1, 64] at L = 256 is U[1, L/4], yet
    # its comparisons had no expected direction and the claim read "not measurable here"; each range here resolves
    # (windows.resolve_e_range, the grid's own resolver) to the one _e_range plants under its literal spelling
    want = [[1, "L/4"], ["L/4", "L/2"], [1, "L"]]
    assert [list(resolve_e_range(s, 256)) for s in spelled] == [list(resolve_e_range(w, 256)) for w in want]
    as_written = _e_range({(1, "L/4"): 0.0, ("L/4", "L/2"): 1.0, (1, "L"): 1.0})
    got = _e_range({(1, "L/4"): 0.0, ("L/4", "L/2"): 1.0, (1, "L"): 1.0}, ranges=spelled)
    assert [c["expected"] for c in got["comparisons"]] == [c["expected"] for c in as_written["comparisons"]]
    assert (got["verdict"], got["reason"]) == (as_written["verdict"], as_written["reason"])
    assert got["verdict"] == "held" and got["reason"].startswith("6 of 6 ")
