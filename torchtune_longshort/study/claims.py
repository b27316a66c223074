"""The paper's claims, one by one, measured on a study's runs (``docs/study/<name>/report.md``, "Claims").

Every comparison is paired by seed: a configuration (RoPE method, alpha, variant) against cross-entropy alone
(``alpha = 0``) on the same method, with the same base model and seed, so the seed-to-seed noise of the data order
cancels. :mod:`torchtune_longshort.study.stats` gives the mean difference and its 95% Student-t interval; a claim is
``held`` when the intervals say what the paper says, ``not held`` when they do not, and ``not measurable here`` when
the study lacks the runs or the scores carry no signal (e.g. a task at 0 for every model). A claim judged per RoPE
method is ``held for some methods only`` when it held for some and not for others; Table 7's is ``partly held`` when
some of its (range, length) comparisons went the paper's way and others did not; SCE against Jeffreys and JS, which
the paper does not claim, is ``new result (no paper claim)``: reported, not judged. The rule used for each verdict is
written next to it in the report.
"""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Sequence

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.study.base_failure import base_failure
from torchtune_longshort.study.comparisons import (
    Records, beats_base, ce_id, ce_improvement, compare, has_signal, long_lengths, methods_compared, opposite, train_ce,
    verdict_from,
)
from torchtune_longshort.study.grid import config_key
from torchtune_longshort.study.records import curve_mean, value
from torchtune_longshort.study.run_configs import main_e_range
from torchtune_longshort.study.values import divergence_tag
from torchtune_longshort.study.stats import correlation, spearman_permutation_p
from torchtune_longshort.windows import resolve_e_range

if TYPE_CHECKING:
    from torchtune_longshort.study.config import StudyConfig

# the paper's numbers each claim is compared with (Du et al., ICML 2025)
PAPER = {
    "table1": "Table 1: the misalignment metric correlates with LongBench-E / perplexity more strongly than the "
              "training loss does (across the paper's fine-tuned Llama-2 checkpoints): the more misaligned a "
              "model, the worse it does at long context.",
    "tables2_3": "Tables 2-3: alpha 0.1-0.3 beats CE on LongBench-E and long-context perplexity, for CLEX, "
                 "LongQLoRA and EABF alike (e.g. CLEX-Llama-2-7B, LongBench-E avg 25.59 -> 26.79 at alpha 0.1).",
    "tables4_5": "Tables 4-5: BABILong improves at 8k and 16k, most with the facts at depth 50-75%, and equals CE "
                 "at depth 0.",
    "table6": "Table 6: alpha 0.5-1.0 hurts (below the alpha 0.1-0.3 results).",
    "table7": "Table 7: e ~ U[1, L/4] is about as good as U[1, L/2]; U[L/4, L/2] is slightly worse; U[1, L] "
              "(no floor on the shorter window) is clearly worse.",
    "tables9_10": "Tables 9-10: the gains hold at equal compute (the regularized run given ~5% fewer steps).",
    "divergence": "No published result: Eq. 3's SCE(p, p) = 2 H(p), so SCE also rewards lower entropy; Jeffreys "
                  "and JS align the windows without that reward.",
}


# ---------------------------------------------------------------------------------------------- the claims
def failed_baseline(cfg: "StudyConfig", recs: Records, method: str) -> Optional[str]:
    """Why ``method``'s CE-only fine-tunes cannot serve as the baseline, or None: their mean ppl is at or above the
    unscaled base's at every length >= L (they did not learn the extension). A loss that beats such a baseline has
    beaten a failed run, which says nothing about the paper's claim."""
    rows = [r for r in ce_improvement(cfg, recs)
            if r["method"] == method and r["length"] >= cfg.L and r["ratio"] is not None]
    if not rows or any(beats_base(r["ratio"]) for r in rows):
        return None
    ratios = " / ".join(f"{r['ratio']:.2f}" for r in rows)
    lengths = " / ".join(length_label(r["length"]) for r in rows)
    return (f"the CE-only fine-tunes did not learn the extension: their ppl over the base's is {ratios} at "
            f"{lengths}, so there is no working baseline to compare against")


def _combined(verdicts: Sequence[str]) -> str:
    measurable = [v for v in verdicts if v != "not measurable here"]
    if not measurable:
        return "not measurable here"
    if all(v == "held" for v in measurable):
        return "held"
    return "held for some methods only" if "held" in measurable else "not held"


def claim_alpha(cfg: "StudyConfig", recs: Records, alphas: Sequence[float], want: str, key: str,
                asked: str = "") -> Dict[str, Any]:
    """Tables 2-3 (``want = better``, alphas 0.1-0.3) and Table 6 (``want = worse``, alpha >= 0.5): per method, the
    paired ppl differences at every length >= L, plus retrieval / QA where they carry signal. A method whose CE-only
    fine-tunes did not learn the extension (:func:`failed_baseline`) is not measurable here. ``asked``: the alphas
    the claim is about, in words, when ``alphas`` is this grid's share of them (Table 6's ">= 0.5")."""
    comps, per_method = [], {}
    for m in cfg.methods:
        dirs = []
        for a in alphas:
            if a not in cfg.alphas:
                continue
            for n in long_lengths(cfg):
                c = compare(cfg, recs, config_key(m, a), ce_id(cfg, m), "ppl", n, lower_is_better=True)
                comps.append(c)
                dirs.append(c["direction"])
            comps += _secondary(cfg, recs, config_key(m, a), ce_id(cfg, m))
        per_method[m] = verdict_from(dirs, want)
        failed = failed_baseline(cfg, recs, m) if dirs else None
        if failed:
            v, r = per_method[m]
            per_method[m] = ("not measurable here", f"{failed} (the intervals alone would say: {v}, {r})")
    if not comps:
        return {"id": key, "paper": PAPER[key], "verdict": "not measurable here",
                "reason": f"no alpha {asked or f'in {list(alphas)}'} in this study's grid", "comparisons": [],
                "per_method": {}}
    verdict = _combined([v for v, _ in per_method.values()])
    reason = "; ".join(f"{m}: {v} ({r})" for m, (v, r) in per_method.items())
    rule = (f"per method: {want} than CE on perplexity (95% interval of the paired difference excluding 0) at one "
            f"or more lengths >= L and {opposite(want)} at none, for alpha in {list(alphas)}")
    return {"id": key, "paper": PAPER[key], "verdict": verdict, "rule": rule, "reason": reason, "comparisons": comps,
            "per_method": {m: {"verdict": v, "reason": r} for m, (v, r) in per_method.items()}}


def _secondary(cfg: "StudyConfig", recs: Records, treated: str, control: str) -> List[Dict[str, Any]]:
    """Retrieval (passkey) and QA (BABILong) comparisons, where the scores vary at all."""
    out = []
    for n in cfg.eval.passkey_lengths:
        for fam in ("passkey", "passkey_digits"):
            if has_signal(cfg, recs, fam, n):
                out.append(compare(cfg, recs, treated, control, fam, n, lower_is_better=False))
    for lab in cfg.eval.babilong_lengths:
        if has_signal(cfg, recs, "babilong", lab):
            out.append(compare(cfg, recs, treated, control, "babilong", lab, lower_is_better=False))
    return out


def claim_babilong(cfg: "StudyConfig", recs: Records) -> Dict[str, Any]:
    """Tables 4-5: QA accuracy by depth at the longest length, alpha 0.1-0.3 against CE."""
    bab = cfg.eval.babilong
    labs, depths = cfg.eval.babilong_lengths, (bab.depths if bab else None) or []
    base = {"id": "tables4_5", "paper": PAPER["tables4_5"], "comparisons": []}
    if not labs or not depths:
        return {**base, "verdict": "not measurable here", "reason": "no BABILong lengths x depths in this study"}
    longest = labs[-1]
    keys = [(longest, d) for d in depths]
    if not any(has_signal(cfg, recs, "babilong", f"{lab}_d{d}") for lab, d in keys):
        return {**base, "verdict": "not measurable here",
                "reason": f"BABILong accuracy at {longest} is the same for every checkpoint (no signal)"}
    comps = [compare(cfg, recs, config_key(m, a), ce_id(cfg, m), "babilong", f"{longest}_d{d}", lower_is_better=False)
             for m in cfg.methods for a in (0.1, 0.3) if a in cfg.alphas for d in depths]
    mid = [c["direction"] for c in comps if int(str(c["length"]).rsplit("_d", 1)[1]) in (50, 75)]
    zero = [c["direction"] for c in comps if str(c["length"]).endswith("_d0")]
    v_mid, r_mid = verdict_from(mid, "better")
    same0 = all(d in ("no difference", "unknown") for d in zero)
    verdict = "held" if v_mid == "held" and same0 else v_mid if v_mid != "held" else "not held"
    reason = f"depth 50-75%: {r_mid}; depth 0: " + ("no difference from CE" if same0 else "differs from CE")
    return {**base, "verdict": verdict, "reason": reason, "comparisons": comps,
            "rule": "held when alpha 0.1-0.3 is better than CE at depth 50-75% and not different at depth 0"}


def claim_e_range(cfg: "StudyConfig", recs: Records, main_range: Any) -> Dict[str, Any]:
    """Table 7: each variant range against the main grid's range ``main_range`` (as written: :func:`main_e_range`)
    at the same method and alpha (perplexity)."""
    v = cfg.variants.e_range
    base = {"id": "table7", "paper": PAPER["table7"], "comparisons": [], "main_e_range": main_range}
    if not v:
        return {**base, "verdict": "not measurable here", "reason": "no e_range variant in this study"}
    ref = config_key(v.method, v.alpha)
    # Table 7, against the main range U[1, L/2]; keyed by the resolved range, so that [1, 64] at L = 256 is U[1, L/4];
    # against another main range the paper expects nothing
    papers = resolve_e_range(main_range, cfg.L) == resolve_e_range([1, "L/2"], cfg.L)
    expect = {resolve_e_range(r, cfg.L): w for r, w in (([1, "L/4"], "no difference"), (["L/4", "L/2"], "worse"),
                                                        ([1, "L"], "worse"))} if papers else {}
    comps, held = [], []
    for r in cfg.grid:
        if r.variant != "e_range" or r.seed != cfg.seeds[0]:
            continue
        cid = r.config
        bounds = resolve_e_range(r.overrides["e_range"], cfg.L)
        for n in long_lengths(cfg):
            c = compare(cfg, recs, cid, ref, "ppl", n, lower_is_better=True)
            c["e_range"] = r.overrides["e_range"]
            c["expected"] = expect.get(bounds)
            comps.append(c)
            if c["expected"] and c["direction"] != "unknown":
                held.append(c["direction"] == c["expected"])
    if not held:
        why = "no range with an interval" if papers else (f"the main range {main_range} is not the paper's [1, 'L/2'],"
                                                          " against which Table 7's expectations hold")
        return {**base, "verdict": "not measurable here", "reason": why, "comparisons": comps}
    verdict = "held" if all(held) else "partly held" if any(held) else "not held"
    return {**base, "verdict": verdict, "comparisons": comps,
            "reason": f"{sum(held)} of {len(held)} (range, length) comparisons against the main range "
                      f"{main_range} went the paper's way",
            "rule": "U[1, L/4]: no difference; U[L/4, L/2] and U[1, L]: worse perplexity (95% interval of the "
                    "paired difference against the main range)"}


def claim_equal_compute(cfg: "StudyConfig", recs: Records) -> Dict[str, Any]:
    v = cfg.variants.equal_compute
    base = {"id": "tables9_10", "paper": PAPER["tables9_10"], "comparisons": []}
    if not v:
        return {**base, "verdict": "not measurable here", "reason": "no equal_compute variant in this study"}
    cid = config_key(v.method, v.alpha, "eqc")
    comps = [compare(cfg, recs, cid, ce_id(cfg, v.method), "ppl", n, True) for n in long_lengths(cfg)]
    verdict, reason = verdict_from([c["direction"] for c in comps], "better")
    return {**base, "verdict": verdict, "reason": reason, "comparisons": comps,
            "rule": f"alpha {v.alpha:g} with floor(max_steps / {v.overhead}) steps better than CE on "
                    "perplexity at one or more lengths >= L and worse at none"}


def claim_divergence(cfg: "StudyConfig", recs: Records) -> Dict[str, Any]:
    """SCE (main grid) against Jeffreys / JS at the same alphas: perplexity and entropy, each against CE."""
    v = cfg.variants.divergence
    base = {"id": "divergence", "paper": PAPER["divergence"], "comparisons": []}
    if not v:
        return {**base, "verdict": "not measurable here", "reason": "no divergence variant in this study"}
    m, comps = v.method, []
    top = max(long_lengths(cfg))
    for a in v.alphas:
        for name, cid in [("sce", config_key(m, a))] + [(divergence_tag(d), config_key(m, a, divergence_tag(d)))
                                                         for d in v.divergences]:
            for fam, n, lower in (("ppl", top, True), ("entropy", cfg.L, None)):  # entropy: no better side
                c = compare(cfg, recs, cid, ce_id(cfg, m), fam, n, lower)
                c["divergence"], c["alpha"] = name, a
                comps.append(c)
    return {**base, "verdict": "new result (no paper claim)", "comparisons": comps,
            "reason": "see the table: each divergence's change in perplexity and in next-token entropy against CE",
            "rule": "reported, not judged"}


def _why_no_rho(mis: Optional[Dict[str, Any]], ce: Optional[Dict[str, Any]], predictors: Dict[str, List[Any]],
                target: Optional[List[Any]]) -> str:
    """Which of Table 1's two causes left rho undefined: too few checkpoints with both values (the count), or a
    value the same for every checkpoint (which one). It said "fewer than 3 ..., or a value the same ..." for both."""
    n = min((r or {}).get("n", 0) for r in (mis, ce))
    if n < 3:
        return f"{n} checkpoint{'s' * (n != 1)} with both values (at least 3 needed)"
    same = [name for name, vals in list(predictors.items()) + [("the perplexity", target or [])]
            if len({v for v in vals if v is not None}) == 1]
    return f"{' and '.join(same) or 'a value'} the same for every checkpoint"


def claim_table1(cfg: "StudyConfig", recs: Records) -> Dict[str, Any]:
    """Across every fine-tuned checkpoint: misalignment at L and training CE against long-context scores."""
    keys = [r.key for r in cfg.grid if recs.get(r.key, {}).get("status") == "ok"]
    L = cfg.L
    predictors = {f"misalignment (Eq. 4) at {length_label(L)}": [value(recs[k], "misalignment", L) for k in keys],
                  "training CE (last steps)": [train_ce(recs[k]) for k in keys]}
    targets = {f"ppl at {length_label(n)}": [value(recs[k], "ppl", n) for k in keys] for n in long_lengths(cfg)}
    for n in cfg.eval.passkey_lengths:
        for fam, name in (("passkey", "passkey"), ("passkey_digits", "passkey digits")):
            if has_signal(cfg, recs, fam, n):
                targets[f"{name} at {length_label(n)}"] = [value(recs[k], fam, n) for k in keys]
    for lab in cfg.eval.babilong_lengths:
        if has_signal(cfg, recs, "babilong", lab):
            targets[f"BABILong at {lab}"] = [value(recs[k], "babilong", lab) for k in keys]
    rows = [{"predictor": p, "target": t, **correlation(xs, ys)} for p, xs in predictors.items()
            for t, ys in targets.items()]
    main_t = f"ppl at {length_label(max(long_lengths(cfg)))}"
    mis = next((r for r in rows if r["target"] == main_t and r["predictor"].startswith("misalignment")), None)
    ce = next((r for r in rows if r["target"] == main_t and r["predictor"].startswith("training")), None)
    base = {"id": "table1", "paper": PAPER["table1"], "correlations": rows, "n_checkpoints": len(keys),
            "rule": f"Spearman rho of the metric with {main_t} positive (more misaligned, higher ppl: the paper's "
                    "direction), its 95% interval above 0 (at |rho| = 1, where there is none: permutation p < 0.05; "
                    "at least 4 checkpoints), and larger than the training CE's |rho|"}
    if not mis or mis["spearman"] is None or not ce or ce["spearman"] is None:
        return {**base, "verdict": "not measurable here", "reason": _why_no_rho(mis, ce, predictors, targets.get(
            main_t)) + ": no rank correlation"}
    reason = (f"rho(metric, {main_t}) = {mis['spearman']:.3f} vs rho(training CE, {main_t}) = {ce['spearman']:.3f} "
              f"over {mis['n']} checkpoints")
    if mis["n"] < 4:  # rho is defined, its interval (n - 3 in Fisher's standard error) is not
        return {**base, "verdict": "not measurable here",
                "reason": reason + f"; no interval with {mis['n']} checkpoints (at least 4 needed)"}
    if mis["spearman_lo"] is None:  # |rho| = 1: Fisher's z is infinite, the exact permutation p decides
        p = spearman_permutation_p(predictors[mis["predictor"]], targets[main_t])
        mis["p_permutation"] = p
        if p >= 0.05:
            return {**base, "verdict": "not held", "reason": reason + f"; |rho| = 1 has no interval and its "
                    f"permutation p = {p:.3g} is not below 0.05"}
        reason += f"; |rho| = 1 has no interval, permutation p = {p:.3g}"
    elif mis["spearman_lo"] <= 0 <= mis["spearman_hi"]:
        return {**base, "verdict": "not held", "reason": reason + "; the metric's interval holds 0"}
    if mis["spearman"] < 0:  # significant, the wrong sign: a strong correlation the other way is not the claim
        return {**base, "verdict": "not held", "reason": reason + "; the metric correlates the opposite way: the "
                "less misaligned checkpoints have the higher ppl"}
    stronger = mis["spearman"] > abs(ce["spearman"])
    return {**base, "verdict": "held" if stronger else "not held",
            "reason": reason + ("" if stronger else "; no stronger than the training CE's")}


def analyze(cfg: "StudyConfig", recs: Records) -> Dict[str, Any]:
    """Every claim, the CE-over-base table and per-configuration entropy / late-position loss."""
    claims = [claim_table1(cfg, recs),
              claim_alpha(cfg, recs, [0.1, 0.3], "better", "tables2_3"),
              claim_babilong(cfg, recs),
              claim_alpha(cfg, recs, [a for a in cfg.alphas if a >= 0.5], "worse", "table6", asked=">= 0.5"),
              claim_e_range(cfg, recs, main_e_range(cfg, records=recs)),
              claim_equal_compute(cfg, recs),
              claim_divergence(cfg, recs)]
    base = recs.get("base", {})
    return {"claims": claims, "ce_vs_base": ce_improvement(cfg, recs), "per_config": per_config(cfg, recs),
            "base_failure": base_failure(cfg, base) if base.get("status") == "ok" else None,
            "methods": methods_compared(cfg, recs)}


def per_config(cfg: "StudyConfig", recs: Records) -> List[Dict[str, Any]]:
    """Per configuration (mean over seeds): entropy at L, loss at positions < L and in [L, 4L) of the longest
    perplexity curve, and passkey / BABILong accuracy at depth 0 (does the loss lean less on early context?)."""
    top, L = max(cfg.eval.ppl_lengths), cfg.L
    out: Dict[str, Dict[str, Any]] = {}
    for r in cfg.grid:
        rec = recs.get(r.key, {})
        if rec.get("status") != "ok":
            continue
        row = out.setdefault(r.config, {"config": r.config, "method": r.method, "alpha": r.alpha,
                                        "variant": r.variant, "vals": {}})
        items = {"entropy": value(rec, "entropy", L), "loss_pos_lt_L": curve_mean(rec, top, 0, L),
                 "loss_pos_ge_L": curve_mean(rec, top, L, top), "ppl_top": value(rec, "ppl", top)}
        pk = cfg.eval.passkey_lengths
        if pk:
            items["passkey_depth_0"] = value(rec, "passkey_depth_0", max(pk))
            items["passkey_digits_depth_0"] = value(rec, "passkey_digits_depth_0", max(pk))
        for k, x in items.items():
            if x is not None:
                row["vals"].setdefault(k, []).append(x)
    for row in out.values():
        row["means"] = {k: statistics.fmean(v) for k, v in row.pop("vals").items()}
    return list(out.values())
