"""The paper's qualitative claims about its synthetic figures, each decided by numbers from the trained runs (the
README's claim table): ``summarize_claims`` turns per-seed MSE curves into ``summary.json``'s claim entries."""

from __future__ import annotations

from typing import Dict, List

import numpy as np

from .models import PE_LABELS
from .outrep import OUTREP_LABELS
from .theory import (
    exact_class_optimum,
    fit_power_law,
    fit_shifted_square,
    length_error_closed_form,
    sum_error_closed_form,
)
from .train import RunConfig


# What each decided claim checks, word for word: the statement its summary.json entry (``claim``), the command's
# printed lines (:func:`claim_lines`) and the docs' claim table give. A claim reads as held only for what its numbers
# decide: the mean task's for NoPE alone, OutRep's as 1/sqrt against the identity target alone.
CLAIM_STATEMENTS = {
    "length_rises_for_every_pe": "Fig. 1b, length task: for every PE and every seed, the mean MSE over l > l_train is "
                                 "more than 100x the mean MSE over l <= l_train",
    "mean_nope_flat": "Fig. 1a, mean task, NoPE only: the seed-mean MSE stays below 1e-4 at every test length "
                      "1..l_test (the other PEs are not checked)",
    "outrep_inv_sqrt_beats_identity": "Fig. 1c, length task (NoPE): f = 1/sqrt(y) gives a lower seed-mean MSE over "
                                      "l > l_train than f = y (only that: not that the rise is removed, nor a "
                                      "comparison with the other f)",
    "longer_l_train_lowers_not_removes": "Fig. 4, length task (NoPE): the seed-mean MSE at l_test strictly decreases "
                                         "as l_train grows, and stays more than 10x the in-range MSE",
}


def summarize_claims(figs: Dict[str, Dict], base: RunConfig, quick: bool = False) -> Dict:
    """The paper's qualitative claims, each with the numbers that decide it (see README's claim table).

    ``figs``: {figure name: {curve label: {"lengths", "l_train", "mse": per-seed MSE arrays over lengths 1..l_test}}}.
    ``quick``: the figures come from a ``--quick`` run; each decided claim's entry then says so itself (``"quick":
    true``), as its printed line does: a reader of ``"held": true`` in summary.json had only ``meta.quick``, which
    a later command into the same folder replaces while the claim entry stays (``keep_earlier_figures``).
    """
    lt = base.l_train
    s: Dict = {}
    if "1b" in figs:
        s["length_rises_for_every_pe"] = _length_rises_for_every_pe(figs["1b"], lt)
    if "1a" in figs:
        s["mean_nope_flat"] = _mean_nope_flat(figs["1a"], lt)
    if "1c" in figs:
        s["outrep_inv_sqrt_beats_identity"] = _outrep_inv_sqrt_beats_identity(figs["1c"], lt)
    if "4" in figs:
        s["longer_l_train_lowers_not_removes"] = _longer_l_train_lowers_not_removes(figs["4"])
    if "1b" in figs or "4" in figs:
        s["theorem_3_1_quadratic"] = _theorem_3_1_fits(figs)
    if "5" in figs:
        s["sum_outrep"] = {k: {"beyond_mse": [float(m[lt:].mean()) for m in v["mse"]],
                               "mse_at_l_test": [float(m[-1]) for m in v["mse"]]} for k, v in figs["5"].items()}
    if "6" in figs:
        s["appendix_g"] = {k: {"in_range_mse": float(np.mean(v["mse"], 0)[:lt].mean()),
                               "beyond_mse": float(np.mean(v["mse"], 0)[lt:].mean()),
                               "mse_at_l_test": float(np.mean(v["mse"], 0)[-1])} for k, v in figs["6"].items()}
    if "theory" in figs:
        s["theory_linear_attention"] = {task: _theory_row(task, figs["theory"][task]["mse"], lt, base.l_test)
                                        for task in ("mean", "length", "sum")}
    for name in CLAIM_STATEMENTS.keys() & s.keys():
        s[name] = {"claim": CLAIM_STATEMENTS[name], **({"quick": True} if quick else {}), **s[name]}
    return s


# Said after each claim line of a --quick run: its verdicts come from a smoke test's budget.
QUICK_VERDICT = " [--quick: a smoke test's steps and seeds, too few to decide it; run without --quick]"


def claim_lines(summary: Dict, names) -> List[str]:
    """One printed line per claim that the figures ``names`` decide: ``claim held: <what was checked>`` (or ``not
    held``), in the words of :data:`CLAIM_STATEMENTS`; a quick run's says its verdict is not one
    (:data:`QUICK_VERDICT`): the figure's own record (:func:`figure_records`, kept with its claim by a later command
    into the folder; else the summary's ``meta``) says whether it was quick, as for ``--replot``."""
    lines = []
    records, run_quick = figure_records(summary), (summary.get("meta") or {}).get("quick")
    for n in names:
        claim = CLAIMS_OF_FIGURE.get(n)
        entry = summary.get(claim)
        if claim in CLAIM_STATEMENTS and isinstance(entry, dict) and "held" in entry:
            record = records.get(n)
            quick = QUICK_VERDICT if entry.get("quick") or (record or {}).get("quick", run_quick) else ""
            lines.append(f"claim {'held' if entry['held'] else 'not held'}: {CLAIM_STATEMENTS[claim]}{quick}")
    return lines


def _length_rises_for_every_pe(fig: Dict, lt: int) -> Dict:
    """Fig. 1b: the length task's error beyond l_train dwarfs the in-range error, whatever the PE."""
    rows = {}
    for label, d in fig.items():
        per_seed = [(float(m[:lt].mean()), float(m[lt:].mean()), float(m[-1])) for m in d["mse"]]
        rows[label] = {
            "in_range_mse": [p[0] for p in per_seed],
            "beyond_mse": [p[1] for p in per_seed],
            "mse_at_l_test": [p[2] for p in per_seed],
            "min_ratio_beyond_over_in": min(p[1] / p[0] for p in per_seed),
        }
    return {
        "held": all(r["min_ratio_beyond_over_in"] > 100 for r in rows.values()),
        "criterion": "every PE and seed: mean MSE over l > l_train is > 100x mean MSE over l <= l_train",
        "per_pe": rows,
    }


def _mean_nope_flat(fig: Dict, lt: int) -> Dict:
    """Fig. 1a: the mean task generalizes with NoPE (flat, tiny error at every length)."""
    rows = {}
    for label, d in fig.items():
        mean = np.mean(d["mse"], axis=0)
        rows[label] = {"max_mse_over_l": float(mean.max()), "in_range_mse": float(mean[:lt].mean()),
                       "mse_at_l_test": float(mean[-1])}
    return {
        "held": rows[PE_LABELS["nope"]]["max_mse_over_l"] < 1e-4,
        "criterion": "NoPE seed-mean MSE below 1e-4 at every test length 1..l_test (paper: order 1e-5)",
        "per_pe": rows,
    }


def _outrep_inv_sqrt_beats_identity(fig: Dict, lt: int) -> Dict:
    """Fig. 1c: OutRep f = 1/sqrt(y) lowers the length task's error beyond l_train."""
    ident, isq = fig[f"f = {OUTREP_LABELS['identity']}"], fig[f"f = {OUTREP_LABELS['inv_sqrt']}"]
    b_id = [float(m[lt:].mean()) for m in ident["mse"]]
    b_is = [float(m[lt:].mean()) for m in isq["mse"]]
    return {
        "held": float(np.mean(b_is)) < float(np.mean(b_id)),
        "criterion": "seed-mean of the mean MSE over l > l_train lower with f = 1/sqrt(y) than with f = y",
        "identity_beyond_mse": b_id,
        "inv_sqrt_beyond_mse": b_is,
        "identity_at_l_test": [float(m[-1]) for m in ident["mse"]],
        "inv_sqrt_at_l_test": [float(m[-1]) for m in isq["mse"]],
        "all_f_beyond_mse_mean": {k: float(np.mean([m[lt:].mean() for m in v["mse"]])) for k, v in fig.items()},
    }


def _longer_l_train_lowers_not_removes(fig: Dict) -> Dict:
    """Fig. 4: a longer l_train lowers the error at l_test but does not remove the rise."""
    rows = {}
    for label, d in fig.items():
        l_tr = d["l_train"]
        mean = np.mean(d["mse"], axis=0)
        rows[label] = {"l_train": l_tr, "mse_at_l_test": float(mean[-1]), "in_range_mse": float(mean[:l_tr].mean()),
                       "ratio_at_l_test_over_in": float(mean[-1] / mean[:l_tr].mean())}
    vals = [r["mse_at_l_test"] for r in sorted(rows.values(), key=lambda r: r["l_train"])]
    return {
        "held": all(a > b for a, b in zip(vals, vals[1:]))
        and all(r["ratio_at_l_test_over_in"] > 10 for r in rows.values()),
        "criterion": "MSE at l_test strictly decreases with l_train, and stays > 10x the in-range MSE",
        "per_l_train": rows,
    }


def _theorem_3_1_fits(figs: Dict[str, Dict]) -> Dict:
    """Theorem 3.1's growth beyond l_train, fitted on every curve of Fig. 1b and Fig. 4."""
    fits = {}
    src = [("1b", k, v) for k, v in figs.get("1b", {}).items()] + [("4", k, v) for k, v in figs.get("4", {}).items()]
    for fig, label, d in src:
        l_tr = d["l_train"]
        mean = np.mean(d["mse"], axis=0)
        l = np.arange(l_tr + 1, len(mean) + 1)
        y = mean[l_tr:]
        if len(l) >= 2:
            fits[f"{fig}: {label}"] = {
                "vs_l_minus_l_train": fit_power_law(l - l_tr, y),
                "vs_l_minus_mean_train_length": fit_power_law(l - (l_tr + 1) / 2.0, y),
                "shifted_square": fit_shifted_square(l, y),
            }
    return {
        "criterion": "fit log MSE = log c + p log(x) over l > l_train (quadratic: p ~ 2); and sqrt(MSE) = a (l - c) "
                     "(a ~ 1: the error is exactly (l - c)^2, i.e. the prediction is stuck at c)",
        "fits": fits,
    }


def _theory_row(task: str, mses: List[np.ndarray], lt: int, lT: int) -> Dict:
    """App. C.1: the trained linear-attention model on ``task`` against the exact class optimum and the closed forms
    (for the sum task: which of the two constants, (l+1)/(4l) or (l+1)/(2l), the run matches)."""
    mean = np.mean(mses, axis=0)
    ref = exact_class_optimum(task, lt, lT, "eos")["error"]
    row = {"trained_at_l_test": [float(m[-1]) for m in mses], "exact_optimum_at_l_test": ref[-1],
           "max_rel_dev_from_optimum_beyond": float(np.max(np.abs(mean[lt:] - ref[lt:]) / np.maximum(ref[lt:], 1e-12)))
           if task != "mean" else None, "max_mse": float(mean.max())}
    if task == "length":
        row["closed_form_at_l_test"] = float(length_error_closed_form(lT, lt))
    if task == "sum":
        l = np.arange(1, lT + 1)
        row["closed_form_binomial_at_l_test"] = float(sum_error_closed_form(lT, lt, "binomial"))
        row["closed_form_doubled_at_l_test"] = float(sum_error_closed_form(lT, lt, "doubled"))
        b = sum_error_closed_form(l, lt, "binomial")[lt:]
        dbl = sum_error_closed_form(l, lt, "doubled")[lt:]
        row["mean_abs_log_ratio_vs_binomial"] = float(np.mean(np.abs(np.log(mean[lt:] / b))))
        row["mean_abs_log_ratio_vs_doubled"] = float(np.mean(np.abs(np.log(mean[lt:] / dbl))))
        binomial_closer = row["mean_abs_log_ratio_vs_binomial"] < row["mean_abs_log_ratio_vs_doubled"]
        row["matches"] = "binomial (l+1)/(4l)" if binomial_closer else "doubled (l+1)/(2l)"
    return row


# the claim entries of summary.json each figure decides (Theorem 3.1's fits: one per curve of Fig. 1b and Fig. 4)
CLAIMS_OF_FIGURE = {"1b": "length_rises_for_every_pe", "1a": "mean_nope_flat", "1c": "outrep_inv_sqrt_beats_identity",
                    "4": "longer_l_train_lowers_not_removes", "5": "sum_outrep", "6": "appendix_g",
                    "theory": "theory_linear_attention"}
FITS = "theorem_3_1_quadratic"


def figure_records(summary: Dict) -> Dict[str, Dict]:
    """{figure: the record of the run that drew it (``base_config``, ``quick``, ``seeds``, and ``l_train`` per curve
    where recorded)} from a summary.json. An older summary (one command's figures, no ``meta.figures``) gives its
    ``meta`` to each figure its scalar_misalignment entries name; a figure it does not name has no record."""
    meta = summary.get("meta") if isinstance(summary, dict) else None
    if not isinstance(meta, dict):
        return {}
    if isinstance(meta.get("figures"), dict):
        return meta["figures"]
    if "base_config" not in meta:
        return {}
    names = {k.split(": ")[0] for k in summary.get("scalar_misalignment") or {}}
    return {n: {"base_config": meta["base_config"], "quick": bool(meta.get("quick")), "seeds": meta.get("seeds")}
            for n in sorted(names)}


def keep_earlier_figures(summary: Dict, earlier: Dict, names) -> List[str]:
    """Into ``summary`` (this command's figures ``names``), the claims, misalignment entries and records of the
    figures an ``earlier`` summary.json of the same folder holds and this command did not redraw: their CSVs and
    PNGs stay in the folder, so their numbers and records stay in its summary; a kept claim decided by a
    ``--quick`` run whose entry does not say so (a summary.json written before entries did) gets ``"quick": true``
    from its figure's record. Returns those figures."""
    kept = [n for n in figure_records(earlier) if n not in names]
    for n in kept:
        summary["meta"]["figures"][n] = figure_records(earlier)[n]
        claim = CLAIMS_OF_FIGURE.get(n)
        if claim in earlier:
            summary[claim] = entry = earlier[claim]
            quick = summary["meta"]["figures"][n].get("quick")
            if quick and isinstance(entry, dict) and "held" in entry and "quick" not in entry:
                # written before entries said it themselves: the kept entry says it now
                summary[claim] = {"claim": entry.get("claim"), "quick": True, **entry}
        fits = {k: v for k, v in ((earlier.get(FITS) or {}).get("fits") or {}).items() if k.split(": ")[0] == n}
        if fits:
            summary.setdefault(FITS, {k: v for k, v in earlier[FITS].items() if k != "fits"})
            summary[FITS].setdefault("fits", {}).update(fits)
        summary["scalar_misalignment"].update({k: v for k, v in (earlier.get("scalar_misalignment") or {}).items()
                                               if k.split(": ")[0] == n})
    return kept
