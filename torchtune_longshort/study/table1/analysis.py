"""The Table-1 question on a set of cells: across RoPE variants of one model, does the misalignment metric (Eq. 4)
predict long-context performance at each length?

Per length, over the variants whose cell ran: Spearman's rho between each predictor (the misalignment metric, SCE;
its Jeffreys part, SCE less the two entropies; the next-token entropy alone, as a reference a metric has to beat)
and each performance figure (perplexity: the paper's claim expects rho > 0, more misaligned -> higher perplexity;
passkey accuracy and digits in place: rho < 0), with the 95% Fisher-z interval of
:func:`~torchtune_longshort.study.stats.correlation` (standard error ``sqrt(1.06 / (n - 3))``, Fieller, Hartley and
Pearson 1957) and the permutation p-value, exact up to 9 variants
(:func:`~torchtune_longshort.study.stats.spearman_permutation_p`).

A verdict per (length, performance figure) for the metric (SCE), significant when its interval excludes 0 and its
permutation p < 0.05 (at ``|rho| = 1``, where Fisher's z is infinite and there is no interval, by the p alone). Both
are asked because the Fisher-z interval is an approximation, anti-conservative at a few variants: at n = 5 it
excludes 0 for rho = 0.9, whose exact p is 0.083 (n = 6: rho 0.83, p 0.058); the report then says they disagree.

- ``held``: rho has the paper's sign, the 95% interval excludes 0 and the permutation p < 0.05;
- ``same direction, not significant``: the paper's sign, the interval holds 0;
- ``opposite direction, not significant`` / ``contradicted`` (the interval excludes 0 on the wrong side);
- ``not measurable``: fewer than 4 variants with both values, or the figure is the same for every variant.

Each row also carries, per value, lm-eval's standard error over the cell's samples (``stderr``; where there is
none, ``stderr_why``: not recorded, one sample, none from lm-eval) and, for a value missing or scored on part of its
samples, why (``why``: not run, failed, or not scored with the reason and how many samples); each correlation names
the variants it leaves out and why (``left_out``).
"""

from __future__ import annotations

from typing import Any, Dict, List, Optional

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.study.eval_config import metric_of
from torchtune_longshort.study.records import not_scored_reasons, short_reason, value, value_stderr
from torchtune_longshort.study.stats import correlation, spearman_permutation_p

# predictor id -> (label, records.value family)
PREDICTORS = {
    "sce": ("misalignment, SCE (Eq. 4)", "misalignment"),
    "jeffreys": ("misalignment, Jeffreys part (SCE minus the entropies)", "jeffreys"),
    "entropy": ("reference: next-token entropy", "entropy"),
}
# performance figure id -> (label, records.value family, the sign of rho the paper's claim expects)
TARGETS = {
    "ppl": ("perplexity", "ppl", +1),
    "passkey": ("passkey accuracy", "passkey", -1),
    "passkey_digits": ("passkey digits in place", "passkey_digits", -1),
}
MAIN_PREDICTOR = "sce"
# the reference predictors as the verdict's "for reference" line names them
REFERENCE_NAMES = {"jeffreys": "the metric's Jeffreys part (SCE minus the entropies)",
                   "entropy": "the next-token entropy"}
MIN_N = 4  # the Fisher-z interval needs n > 3


def strength(rho: Optional[float]) -> str:
    """A word for |rho|: strong (>= 0.7), moderate (>= 0.4), weak (< 0.4)."""
    if rho is None:
        return "no"
    a = abs(rho)
    return "strong" if a >= 0.7 else "moderate" if a >= 0.4 else "weak"


def verdict(corr: Dict[str, Any], expected: int, ys: List[Optional[float]]) -> Dict[str, str]:
    """The verdict of one correlation (see the module doc) and why, in words."""
    vals = [y for y in ys if y is not None]
    if corr["n"] < MIN_N:
        return {"verdict": "not measurable", "why": f"{corr['n']} variants with both values (at least {MIN_N} "
                                                      "needed)"}
    if len(set(vals)) < 2:
        return {"verdict": "not measurable", "why": f"the figure is {vals[0]:.4g} for every variant: no ranking"}
    rho, lo, hi = corr["spearman"], corr["spearman_lo"], corr["spearman_hi"]
    if rho is None:
        return {"verdict": "not measurable", "why": "the metric is the same for every variant"}
    with_sign = rho * expected > 0
    p = corr.get("p_permutation")
    # significance: the interval excludes 0 and the permutation p < 0.05; where the interval is undefined
    # (|rho| = 1), the p alone
    p_sig = p is not None and p < 0.05
    iv_excludes = lo is not None and (lo > 0 or hi < 0)
    excludes = p_sig if lo is None else iv_excludes and (p is None or p_sig)
    if with_sign and excludes:
        v = "held"
    elif with_sign:
        v = "same direction, not significant"
    elif excludes:
        v = "contradicted"
    else:
        v = "opposite direction, not significant"
    want = "positive" if expected > 0 else "negative"
    iv = f"95% interval [{lo:.2f}, {hi:.2f}]" if lo is not None else f"no interval (|rho| = 1), exact p = {p:.3g}"
    disagree = (f"; the interval excludes 0 but the permutation p = {p:.3g} is not below 0.05 (Fisher's z is "
                "approximate at few variants): not significant") if iv_excludes and p is not None and not p_sig else ""
    return {"verdict": v, "why": f"{strength(rho)} rho {rho:+.2f}, {iv} (the claim expects {want}), "
                                 f"n = {corr['n']}{disagree}"}


def _task(family: str, n: int) -> str:
    return metric_of("misalignment" if family == "entropy" else family, n)[0]


def why_missing(rec: Dict[str, Any], family: str, n: int, have: bool) -> str:
    """Why a cell has no ``family`` value at length ``n`` (``have``: False), or has one from part of its samples
    (True; "" when every sample was scored): ``not run``, ``failed``, or ``not scored`` with the reason
    (:func:`~torchtune_longshort.study.records.short_reason`: the text could not fill the length, no data, a prompt
    longer than the model takes) and how many of the cell's samples (``count not recorded`` in records written before
    the runner kept it)."""
    status = rec.get("status") or "not run"
    if status != "ok":
        return "" if have else status if status == "not run" else "failed"
    task = _task(family, n)
    reasons = "; ".join(dict.fromkeys(short_reason(r) for r in not_scored_reasons(rec, task))) or "no value reported"
    if "not_scored_counts" not in rec:
        return "" if have else f"not scored: {reasons} (count not recorded)"
    k = sum(((rec["not_scored_counts"].get(task) or {}).get("samples") or {}).values())
    of = f"{k} of {(rec.get('samples') or {}).get(task, '?')} samples"
    if have:
        return f"{of} not scored: {reasons}" if k else ""
    return f"not scored ({of}): {reasons}"


def why_no_stderr(rec: Dict[str, Any], family: str, n: int) -> str:
    """Why a cell's ``family`` value has no standard error: ``not recorded`` (a record written before the runner kept
    lm-eval's), derived (the entropy), one sample, or lm-eval gives none for that metric (perplexity's aggregation)."""
    if "stderr" not in rec:
        return "not recorded"
    if family == "entropy":
        return "none: derived from SCE and Jeffreys, whose errors are correlated"
    if (rec.get("samples") or {}).get(_task(family, n)) == 1:
        return "none: one sample"
    return "none from lm-eval for this metric"


def length_rows(recs: Dict[str, Dict[str, Any]], length: int) -> List[Dict[str, Any]]:
    """Per variant at ``length``: its status and every predictor's and figure's value (None where not scored)."""
    rows = []
    for rec in recs.values():
        if rec.get("length") != length:
            continue
        ok = rec.get("status") == "ok"
        row = {"variant": rec["variant"], "method": rec.get("method"), "status": rec.get("status"),
               "error": rec.get("error"), "wall_s": rec.get("wall_s"), "samples": rec.get("samples") if ok else None,
               "stderr": {}, "stderr_why": {}, "why": {}}
        for key, fam in [(pid, p[1]) for pid, p in PREDICTORS.items()] + [(tid, t[1]) for tid, t in TARGETS.items()]:
            row[key] = value(rec, fam, length) if ok else None
            row["stderr"][key] = value_stderr(rec, fam, length) if ok else None
            if row[key] is not None and row["stderr"][key] is None:
                row["stderr_why"][key] = why_no_stderr(rec, fam, length)
            if why := why_missing(rec, fam, length, row[key] is not None):
                row["why"][key] = why
        rows.append(row)
    return rows


def analyze(recs: Dict[str, Dict[str, Any]], lengths: List[int]) -> Dict[str, Any]:
    """Every length's rows, correlations and verdicts, and the headline (see :func:`headline`)."""
    per_length = {}
    for n in lengths:
        rows = length_rows(recs, n)
        corrs = []
        for pid, (plabel, _) in PREDICTORS.items():
            for tid, (tlabel, _, sign) in TARGETS.items():
                xs, ys = [r[pid] for r in rows], [r[tid] for r in rows]
                c = correlation(xs, ys)  # no interval at |rho| = 1 (Fisher's z is infinite): the p decides
                c["p_permutation"] = spearman_permutation_p(xs, ys)
                c["left_out"] = {r["variant"]: "; ".join(f"{k}: {r['why'].get(k, 'no value')}" for k in (pid, tid)
                                                         if r[k] is None)
                                 for r in rows if r[pid] is None or r[tid] is None}
                c.update({"predictor": pid, "predictor_label": plabel, "target": tid, "target_label": tlabel,
                          "expected_sign": sign, **verdict(c, sign, ys)})
                corrs.append(c)
        per_length[str(n)] = {"length": n, "label": length_label(n), "rows": rows, "correlations": corrs}
    return {"per_length": per_length, "headline": headline(per_length)}


def rho_text(c: Dict[str, Any]) -> str:
    """Spearman's rho of a correlation with its 95% interval, ``+0.71 [0.02, 0.94]`` (``—`` when undefined)."""
    if c.get("spearman") is None:
        return "—"
    iv = f" [{c['spearman_lo']:.2f}, {c['spearman_hi']:.2f}]" if c.get("spearman_lo") is not None else ""
    return f"{c['spearman']:+.2f}{iv}"


def main_correlation(entry: Dict[str, Any], target: str) -> Dict[str, Any]:
    """The metric's (SCE's) correlation with ``target`` in one length's entry."""
    return next(c for c in entry["correlations"] if c["predictor"] == MAIN_PREDICTOR and c["target"] == target)


def headline(per_length: Dict[str, Dict[str, Any]]) -> Dict[str, Any]:
    """The answer in one word and one sentence per figure (docs/study/table1.md): ``holds`` when the metric's
    interval has the claim's sign for perplexity at every length and every other figure holds too; ``holds for
    perplexity`` when passkey does not follow; ``holds at some lengths``; ``does not hold`` when a figure
    contradicts it; ``not shown`` when perplexity's intervals all hold 0; ``not measurable`` when no perplexity
    correlation could be computed."""
    by_target: Dict[str, List[str]] = {t: [] for t in TARGETS}
    lines = []
    for entry in per_length.values():
        for t in TARGETS:
            c = main_correlation(entry, t)
            by_target[t].append(c["verdict"])
            lines.append(f"{TARGETS[t][0]} at {entry['label']}: {c['verdict']} ({c['why']})")
        ref = [c for c in entry["correlations"] if c["target"] == "ppl" and c["predictor"] != MAIN_PREDICTOR]
        if all(c["spearman"] is not None for c in ref):  # each with its interval and p, as the metric's
            lines.append(f"for reference, perplexity at {entry['label']} " + "; ".join(
                f"against {REFERENCE_NAMES[c['predictor']]}: rho {rho_text(c)}"
                + (f", p {c['p_permutation']:.2g}" if c.get("p_permutation") is not None else "") for c in ref))
    ppl = [v for v in by_target["ppl"] if v != "not measurable"]
    others = [v for t in TARGETS if t != "ppl" for v in by_target[t] if v != "not measurable"]
    if not ppl:
        word = "not measurable"
    elif any(v == "contradicted" for v in ppl + others):
        word = "does not hold"
    elif all(v == "held" for v in ppl):
        word = "holds" if others and all(v == "held" for v in others) else "holds for perplexity"
    elif any(v == "held" for v in ppl):
        word = "holds at some lengths"
    else:
        word = "not shown"
    return {"verdict": word, "by_target": by_target, "lines": lines}
