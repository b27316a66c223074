"""The "Claims" part of a study's report.md, from :func:`torchtune_longshort.study.claims.analyze`'s data."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List, Optional

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.plots.axes import table_number
from torchtune_longshort.study.base_config import GATE_MEASURES
from torchtune_longshort.study.comparisons import RECOVERY
from torchtune_longshort.study.report_folder import BASE_FAILURE_PLOT

if TYPE_CHECKING:
    from torchtune_longshort.study.config import StudyConfig


def _f(x: Optional[float], digits: int = 4) -> str:
    return "—" if x is None else table_number(x, digits)


def _interval(c: Dict[str, Any]) -> str:
    if c.get("mean") is None:
        return "—"
    if c.get("sign_p") is not None:
        return f"{_f(c['mean'])} in every seed (n={c['n']}; sign-flip p = {_f(c['sign_p'], 3)})"
    if c.get("lo") is None:
        return f"{_f(c['mean'])} (n={c['n']}, no interval)"
    return f"{_f(c['mean'])} [{_f(c['lo'])}, {_f(c['hi'])}] (n={c['n']})"


def _coefficient(r: Dict[str, Any], name: str) -> str:
    """A correlation coefficient with its 95% interval, or why it has none (n <= 3, or +-1: Fisher's z infinite)."""
    if r.get(name) is None:
        return "—"
    if r.get(f"{name}_lo") is None:
        return f"{_f(r[name], 3)} (no interval)"
    return f"{_f(r[name], 3)} [{_f(r[f'{name}_lo'], 3)}, {_f(r[f'{name}_hi'], 3)}]"


def _length(x: Any) -> str:
    return length_label(x) if isinstance(x, int) else str(x)


def md_table(header: List[str], rows: List[List[str]]) -> List[str]:
    """A Markdown table (its lines, then a blank one); ``|`` and newlines in cells escaped."""
    esc = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    out = ["| " + " | ".join(map(esc, header)) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(map(esc, r)) + " |" for r in rows] + [""]


def _comparisons(comps: List[Dict[str, Any]], extra: Optional[List[str]] = None) -> List[str]:
    extra = extra or []
    rows = [[c["treated"], c["control"], c["family"], _length(c["length"])] + [str(c.get(k, "")) for k in extra]
            + [_interval(c), c["direction"]] for c in comps]
    return md_table(["configuration", "against", "score", "length"] + extra
                  + ["paired difference, mean [95% CI]", "direction"], rows)


def ce_section(rows: List[Dict[str, Any]], L0: int, L: int) -> List[str]:
    md = ["### What the CE-only fine-tunes learned", "",
          "Perplexity of the base model (pre-trained at L0, unscaled RoPE, extrapolating) and of the CE-only "
          "fine-tunes (mean over seeds); ratio < 1: the fine-tune is better than the base. The controls' rule: "
          f"within L0 = {L0} a CE-only fine-tune recovers the base (ppl at most {RECOVERY}x the base's), beyond it "
          f"it beats the base. The claims read lengths >= L = {L} only, where a method whose control does not beat "
          "the base is not measurable.", ""]
    body = [[r["method"], length_label(r["length"]), _f(r["base"]), _f(r["ce_mean"]), str(r["n"]), _f(r["ratio"], 3),
             r.get("control", "—")] for r in rows]
    md += md_table(["method", "length", "base ppl", "CE fine-tune ppl", "seeds", "ratio", "control"], body)
    short = [f"{r['method']} at {length_label(r['length'])} (ratio {_f(r['ratio'], 3)})" for r in rows
             if r["length"] <= L0 and r.get("control", "").startswith("does NOT")]
    if short:  # the claims never look there, so say it where the reader looks
        md += [f"Not recovered within L0: {', '.join(short)}. That method's alpha comparisons below L say how the "
               "term acts on a control that has not relearned the short context; the verdicts do not use them.", ""]
    return md


def base_section(b: Optional[Dict[str, Any]], cfg: "StudyConfig") -> List[str]:
    """The unscaled base beyond L0: the failure the RoPE methods and the loss are meant to fix."""
    if not b:
        return ["### The base model", "", "No evaluated base model in this study.", ""]
    L0, need, measure = cfg.L0, cfg.base.min_ppl_ratio, cfg.base.gate_measure
    md = ["### The base model: how it fails beyond L0", "",
          f"The pre-trained model, unscaled RoPE, at L0 = {L0} and beyond (plot: `{BASE_FAILURE_PLOT}`). Sequence "
          f"ratio: ppl of {4 * L0}-token sequences over ppl of {L0}-token ones. Position ratio: inside the "
          f"{4 * L0}-token sequences, ppl of the tokens at positions [{3 * L0}, {4 * L0}) over that of the tokens "
          f"at [0, {L0}); late-position ratio: the same over the tokens at [{L0 // 2}, {L0}), which already had "
          "half a window of context." + (f" The grid starts only when the gate (base.min_ppl_ratio = {need}, on "
                                         f"the {measure} ratio) holds."
                                         if need else ""), "",
          f"Sequence ratio **{_f(b['sequence_ratio'], 3)}**; position ratio **{_f(b['position_ratio'], 3)}**; "
          f"late-position ratio **{_f(b.get('late_position_ratio'), 3)}**.", ""]
    short = [f"{m} ratio ({_f(b[k], 3)})" for m, k in GATE_MEASURES.items()
             if need and m != measure and b.get(k) is not None and b[k] < need]
    if short:  # a reading the gate does not use would have refused this base: say so where the reader looks
        md += [f"The {' and the '.join(short)} is below base.min_ppl_ratio = {need}: by that reading this base "
               f"does not fail beyond L0 as much as the gate asks; the grid ran on the {measure} ratio.", ""]
    md += md_table(["length", "ppl", "ratio to L0"], [[length_label(r["length"]), _f(r["ppl"]), _f(r["ratio"], 3)]
                                                      for r in b["rows"]])
    md += [f"Per-position ppl inside the {length_label(b['curve_length'])}-token sequences:", ""]
    md += md_table(["positions", "ppl"], [[f"[{r['lo']}, {r['hi']})", _f(r["ppl"])] for r in b["bins"]])
    return md


def methods_section(m: Dict[str, Any]) -> List[str]:
    md = [f"### Do the RoPE methods differ? {m['verdict'].upper()}", "",
          "CE-only fine-tunes (alpha = 0) of each method against each other, paired by seed, at every ppl length "
          f"(`configuration` minus `against`; negative: the configuration has the lower ppl). {m['reason']}.", ""]
    return md + (_comparisons(m["comparisons"]) if m["comparisons"] else [])


def claim_section(c: Dict[str, Any]) -> List[str]:
    md = [f"### {c['id']}: {c['verdict'].upper()}", "", f"Paper: {c['paper']}", ""]
    if c.get("rule"):
        md += [f"Rule: {c['rule']}.", ""]
    md += [f"Measured here: {c.get('reason', '')}.", ""]
    if c.get("per_method"):
        md += md_table(["method", "verdict", "why"],
                       [[m, v["verdict"], v["reason"]] for m, v in c["per_method"].items()])
    if c.get("correlations"):
        body = [[r["predictor"], r["target"], str(r["n"]), _coefficient(r, "pearson"), _coefficient(r, "spearman")]
                for r in c["correlations"]]
        md += [f"Across {c['n_checkpoints']} fine-tuned checkpoints (every configuration and seed):", ""]
        md += md_table(["predictor", "target", "n", "Pearson r [95% CI]", "Spearman rho [95% CI]"], body)
    if c.get("comparisons"):
        extra = (["e_range", "expected"] if c["id"] == "table7"
                 else ["divergence", "alpha"] if c["id"] == "divergence" else [])
        md += _comparisons(c["comparisons"], extra)
    return md


def per_config_section(rows: List[Dict[str, Any]], L: int, top: int) -> List[str]:
    md = ["### Entropy and where the loss falls, per configuration", "",
          f"Mean over seeds. Entropy: mean next-token entropy (nats) of the model's distributions at the "
          f"misalignment task's {length_label(L)} windows. Loss by position: mean NLL of the {length_label(top)}-token "
          f"perplexity curve at positions below L = {L} and at L and beyond (does the loss lean less on early "
          "context?). Passkey at depth 0: the key at the start of the context.", ""]
    body = [[r["config"], r["method"], f"{r['alpha']:g}", r["variant"] or "main",
             _f(r["means"].get("entropy")), _f(r["means"].get("loss_pos_lt_L")), _f(r["means"].get("loss_pos_ge_L")),
             _f(r["means"].get("ppl_top")), _f(r["means"].get("passkey_depth_0"), 3),
             _f(r["means"].get("passkey_digits_depth_0"), 3)] for r in rows]
    return md + md_table(["configuration", "method", "alpha", "variant", "entropy", "loss, pos < L",
                          "loss, pos >= L", f"ppl {length_label(top)}", "passkey depth 0",
                          "passkey digits depth 0"], body)


QUICK_VERDICTS = ("**A `--quick` run: a smoke test of the pipeline, its steps and seeds too few to decide any claim; "
                  "its verdicts and numbers mean nothing (run without --quick).**")


def verdicts_markdown(analysis: Dict[str, Any], quick: bool = False) -> List[str]:
    """The answer, at the top of the report: each of the paper's claims, its verdict here and why in one line (the
    numbers follow, and each claim's section under "Claims, one by one"). Under ``quick`` a line above the table
    says that a smoke run's verdicts decide nothing (as the figures' red mark and the synthetic claims' lines do)."""
    verdicts = [[c["id"], c["verdict"], c.get("reason", "")] for c in analysis["claims"]]
    return (["## The answer: the paper's claims, one line each", ""] + ([QUICK_VERDICTS, ""] if quick else [])
            + ["Each claim's rule, paired differences and intervals are under \"Claims, one by one\" below.", ""]
            + md_table(["claim", "verdict", "in short"], verdicts))


def claims_markdown(analysis: Dict[str, Any], cfg: "StudyConfig") -> List[str]:
    md = ["## Claims, one by one", "",
          "Each comparison is paired by seed against cross-entropy alone (alpha = 0) on the same RoPE method: "
          "mean difference over seeds and its 95% Student-t interval. Perplexity: lower is better (a negative "
          "difference favours the configuration); accuracies: higher is better. `direction` is `better` / "
          "`worse` when the interval excludes 0, `no difference` when it holds 0, `unknown` with one seed; a "
          "difference equal in every seed has no spread to build an interval from and is judged by the exact "
          "sign-flip test instead (p = 2 / 2^n; 0.25 at 3 seeds). The "
          "verdicts, one line each, open the report.", ""]
    md += base_section(analysis.get("base_failure"), cfg)
    md += ce_section(analysis["ce_vs_base"], cfg.L0, cfg.L)
    md += methods_section(analysis["methods"])
    for c in analysis["claims"]:
        md += claim_section(c)
    md += per_config_section(analysis["per_config"], cfg.L, max(cfg.eval.ppl_lengths))
    return md
