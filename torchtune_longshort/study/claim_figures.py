"""The figures of the report's claims section: the base's failure beyond L0, metric against performance (Table 1),
perplexity against alpha, and paired-difference bars (Table 7's e ranges, the divergences against CE).

They follow the rules of :mod:`torchtune_longshort.study.figures` (value axes, visible series, seed counts in titles,
quick marks)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List

from torchtune_longshort.output_guard import save_figure
from torchtune_longshort.plots.axes import (LENGTH_LABEL, MARKERS, POSITION_LABEL, below_x_axis, length_axis,
                                            mark_quick, note_missing, overlapping, position_axis, series_style,
                                            value_axis)
from torchtune_longshort.plots.panels import panel_row
from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.plots.not_drawn import positions_not_drawn
from torchtune_longshort.study.comparisons import by_seed, long_lengths, train_ce
from torchtune_longshort.study.config import StudyConfig
from torchtune_longshort.study.eval_config import metric_of
from torchtune_longshort.study.grid import config_key
from torchtune_longshort.study.labels import e_range_text, missing_text, seeds_of_cells, seeds_text
from torchtune_longshort.study.records import metric_value, value, why_empty
from torchtune_longshort.study.report_folder import (ALPHA_PLOT, BASE_FAILURE_PLOT, DIVERGENCE_PLOT, E_RANGE_PLOT,
                                                     SCATTER_PLOT)
from torchtune_longshort.study.stats import correlation, direction

# A paired difference's direction (``study.stats.direction``) -> (bar colour, legend text). Only an interval that
# excludes 0 gets a colour of its own; one that holds 0 is neutral grey whatever the sign of its mean.
DIRECTION_STYLE = {
    "better": ("tab:green", "95% interval excludes 0: better"),
    "worse": ("tab:red", "95% interval excludes 0: worse"),
    "lower": ("tab:blue", "95% interval excludes 0: lower"),
    "higher": ("tab:orange", "95% interval excludes 0: higher"),
    "no difference": ("0.65", "95% interval includes 0: no clear difference"),
    "unknown": ("0.88", "no interval (fewer than 2 seeds)"),
}
# A compared score family -> (what it is, its unit): the bars of different units never share an axis.
# Points of one method closer than this fraction of both axes' spans show as one dot (a third of the scatter's
# marker, about 5 pt wide on panels about 300 pt wide and 200 pt high).
ONE_DOT_FRACTION = 0.006
FAMILY_UNIT = {"ppl": ("perplexity", "ppl"), "entropy": ("next-token entropy", "nats")}


def _method_label(m: str, xs: List[float], ys: List[float]) -> str:
    """A method's legend entry: its own Spearman rho and n (a pooled rho over methods that sit in separate clusters
    can come from the gaps between the clusters alone; each method's own says whether the metric orders its own
    checkpoints)."""
    rho = correlation(xs, ys)["spearman"]
    if rho is not None:
        return f"{m}: Spearman {rho:+.2f}, n={len(xs)}"
    why = "n < 3" if len(xs) < 3 else "misalignment constant" if len(set(xs)) < 2 else \
        "performance constant" if len(set(ys)) < 2 else "too few finite pairs"
    return f"{m}: n={len(xs)}, no rho ({why})"


def _why_no_point(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]], key: str, no_x: bool, no_y: bool,
                  xname: str) -> str:
    """Why checkpoint ``key`` gives no point on a Table-1 panel (x ``xname``, y the ppl at the longest length): its
    run's state, or which value it lacks and why."""
    top, L = max(cfg.eval.ppl_lengths), cfg.L
    ppl = (metric_of("ppl", top)[0], length_label(top))
    if (recs.get(key) or {}).get("status") != "ok":
        return why_empty(recs, [key], *ppl)
    parts = [f"ppl at {ppl[1]}: {why_empty(recs, [key], *ppl)}"] if no_y else []
    if no_x:
        parts.append(f"{xname}: " + (why_empty(recs, [key], metric_of("misalignment", L)[0], length_label(L))
                                     if xname.startswith("misalignment") else "no training CE recorded"))
    return "; ".join(parts)


def scatter_figure(table1: Dict[str, Any], cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]):
    """Table 1: every checkpoint's misalignment at L and training CE against its perplexity at the longest length.

    Both axes of both panels are value axes (:func:`plot_axes.value_axis`): plain, short tick labels that never run
    into each other, even when a quick study's values agree to the fourth decimal. The title gives the pooled
    Spearman rho of Table 1, the legend (under the panel, covering no point) each method's own; checkpoints that
    give no point are counted on the panel with the reason (not run, failed, a length the text could not fill).
    Markers are open, so that near points of two methods overlay without hiding each other, and ``k`` points of one
    method that make one dot (two seeds that trained alike) are marked ``×k`` beside it, said in the title (the
    panel showed one dot for two checkpoints under a title counting both)."""
    from matplotlib.figure import Figure

    top, L = max(cfg.eval.ppl_lengths), cfg.L
    fig = Figure(figsize=(10, 4.6), layout="constrained")
    axes = fig.subplots(1, 2)
    at_top, at_L = length_label(top), length_label(L)
    for ax, (name, getx) in zip(axes, ((f"misalignment (Eq. 4) at {at_L}", lambda r: value(r, "misalignment", L)),
                                       ("training CE (last steps)", train_ce))):
        xs_all: List[float] = []
        ys_all: List[float] = []
        lost: Dict[str, int] = {}
        drawn: List[Any] = []
        for i, m in enumerate(cfg.methods):
            pts = []
            for k in (r.key for r in cfg.grid if r.method == m):
                rec = recs.get(k) or {}
                x, y = getx(rec), value(rec, "ppl", top)
                if rec.get("status") == "ok" and x is not None and y is not None:
                    pts.append((k, x, y))
                    continue
                why = _why_no_point(cfg, recs, k, x is None, y is None, name)
                lost[why] = lost.get(why, 0) + 1
            xs, ys = [p[1] for p in pts], [p[2] for p in pts]
            ax.scatter(xs, ys, label=_method_label(m, xs, ys), s=26, marker=MARKERS[i % len(MARKERS)],
                       facecolors="none", edgecolors=f"C{i % 10}", linewidths=1.3)
            xs_all += xs
            ys_all += ys
            drawn.append((f"C{i % 10}", pts))
        value_axis(ax, xs_all, axis="x")
        value_axis(ax, ys_all)
        one_dot = _mark_one_dots(ax, drawn)
        row = next((r for r in table1.get("correlations", []) if r["predictor"] == name
                    and r["target"] == f"ppl at {at_top}"), None)
        rho = f"pooled Spearman {row['spearman']:.2f}, " if row and row.get("spearman") is not None else ""
        ax.set_xlabel(name)
        ax.set_ylabel(f"perplexity at {at_top}")
        ax.set_title(f"{name}\n{rho}{len(xs_all)} checkpoint{'s' * (len(xs_all) != 1)}"
                     + (" (×k: k of them on one dot)" if one_dot else ""), fontsize=9)
        legend = ax.legend(fontsize=7, loc="upper center", bbox_to_anchor=(0.5, 0.0), bbox_transform=below_x_axis(ax),
                           ncols=1, frameon=False)
        if not xs_all:
            ax.set_xticks([])
        note_missing(ax, "no point:\n" + "\n".join(f"{n} checkpoint{'s' * (n > 1)}: {w}" for w, n in lost.items())
                     if lost else "", 4.2, below=legend)
    mark_quick(fig, cfg.quick)
    return fig


def _mark_one_dots(ax, drawn: List[Any]) -> bool:
    """Mark ``×k`` beside each dot of ``drawn`` (``(colour, [(key, x, y), ...])`` per method, drawn on ``ax`` with
    its limits set) where ``k`` points of one method lie within a third of a marker of each other (one dot at the
    figure's size); whether any was marked."""
    marked = False
    for colour, pts in drawn:
        at = {p[0]: p[1:] for p in pts}
        for keys in overlapping(ax, pts, frac=ONE_DOT_FRACTION):
            x, y = (statistics.fmean(at[k][j] for k in keys) for j in (0, 1))
            ax.annotate(f"×{len(keys)}", (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7, color=colour)
            marked = True
    return marked


def alpha_figure(cfg: StudyConfig, recs: Dict[str, Dict[str, Any]]):
    """Perplexity against alpha at each length >= L, one panel per method (mean ± sd over seeds; a plain value at
    one seed). An (alpha, length) with no value is named on its panel with the reason (not run, failed, a length
    the text could not fill, ...)."""
    methods = list(cfg.methods)
    fig, axes = panel_row(len(methods), (4.5, 3.6))
    lengths = long_lengths(cfg)
    for ax, m in zip(axes, methods):
        ys_all: List[float] = []
        counts: List[int] = []
        missing = []
        for i, n in enumerate(lengths):
            pts = []
            for j, a in enumerate(cfg.alphas):
                vals = list(by_seed(cfg, recs, config_key(m, a), "ppl", n).values())
                if vals:
                    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                    pts.append((j, statistics.fmean(vals), sd))
                    counts.append(len(vals))
                else:
                    pts.append((j, math.nan, math.nan))  # the line breaks there, never joined over
                    missing.append((f"ppl {length_label(n)}", f"alpha={a:g}", why_empty(
                        recs, [r.key for r in cfg.runs_of(m, a)], metric_of("ppl", n)[0], length_label(n))))
            if any(math.isfinite(p[1]) for p in pts):
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], capsize=3,
                            label=f"ppl {length_label(n)}", **series_style(i, len(lengths), len(pts)))
                ys_all += [p[1] - p[2] for p in pts] + [p[1] + p[2] for p in pts]
        ax.set_xticks(range(len(cfg.alphas)), [f"{a:g}" for a in cfg.alphas])
        ax.set_xlim(-0.5, len(cfg.alphas) - 0.5)
        value_axis(ax, ys_all)
        ax.set_xlabel("alpha")
        ax.set_ylabel("perplexity")
        ax.set_title(f"{m}: {seeds_of_cells(counts)}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        note_missing(ax, missing_text(missing, [f"ppl {length_label(n)}" for n in lengths],
                                      [f"alpha={a:g}" for a in cfg.alphas], every=("every length", "every alpha")),
                     4.1)
    mark_quick(fig, cfg.quick)
    return fig


def bars_figure(comps: List[Dict[str, Any]], label_key: Callable[[Dict[str, Any]], str], title: str,
                quick: bool = False):
    """Paired differences against a reference (mean and 95% interval) as horizontal bars, one per comparison, a
    panel per score family (perplexity and entropy never share an axis; each axis names its unit).

    A bar's colour is its interval's verdict (``direction``, from :func:`torchtune_longshort.study.stats.direction`):
    green / red (better / worse) or blue / orange (lower / higher, a score with no better side) only when the
    interval excludes 0; grey when it holds 0, whatever the mean's sign; light grey without an interval. The
    legend says which is which."""
    from matplotlib.figure import Figure
    from matplotlib.patches import Patch

    rows = [c for c in comps if c.get("mean") is not None]
    fams = list(dict.fromkeys(c.get("family", "") for c in rows)) or [""]
    counts = [max(2, sum(c.get("family", "") == f for c in rows)) for f in fams]
    fig = Figure(figsize=(7.5, 0.35 * sum(counts) + 1.1 * len(fams) + 1.2), layout="constrained")
    axes = fig.subplots(len(fams), 1, squeeze=False, gridspec_kw={"height_ratios": counts})[:, 0]
    used: List[str] = []
    for ax, fam in zip(axes, fams):
        fr = [c for c in rows if c.get("family", "") == fam]
        ys = list(range(len(fr)))
        xs: List[float] = [0.0]
        verdicts: List[str] = []
        for y, c in zip(ys, fr):
            d = c.get("direction") or direction(c, True if fam == "ppl" else None)
            d = d if d in DIRECTION_STYLE else "unknown"
            used.append(d)
            verdicts.append(d)
            ax.barh(y, c["mean"], color=DIRECTION_STYLE[d][0], edgecolor="black", lw=0.5, height=0.7)
            xs.append(c["mean"])
            if c.get("lo") is not None and c.get("hi") is not None:
                err = [[max(0.0, c["mean"] - c["lo"])], [max(0.0, c["hi"] - c["mean"])]]
                ax.errorbar(c["mean"], y, xerr=err, fmt="o", ms=3, color="black", capsize=3, lw=1)
                xs += [c["lo"], c["hi"]]
            else:  # the mean alone still shows where a bar too short to see ends
                ax.plot([c["mean"]], [y], "o", ms=3, color="black")
        # each bar's mean (and its seeds where the bars pair different numbers): a short bar beside a wide
        # interval is still read, and its colour's verdict checked against a number
        ns = {c.get("n") for c in rows}
        ax.set_yticks(ys, [f"{label_key(c)}: {c['mean']:+.3g}" + (f" (n={c.get('n')})" if len(ns) > 1 else "")
                           for c in fr], fontsize=7)
        for tick, d in zip(ax.get_yticklabels(), verdicts):  # a verdict's colour on its label too: a bar too
            if d not in ("no difference", "unknown"):  # short to see keeps it
                tick.set_color(DIRECTION_STYLE[d][0])
        ax.set_ylim(len(fr) - 0.5, -0.5)  # the first comparison on top
        ax.axvline(0, color="black", lw=0.8)
        value_axis(ax, xs, axis="x")
        name, unit = FAMILY_UNIT.get(fam, (fam or "score", ""))
        ax.set_xlabel(f"{name} difference" + (f" ({unit})" if unit else "") + ": mean and 95% interval")
        if len(fams) > 1:
            ax.set_title(name + (f" ({unit})" if unit else ""), fontsize=9)
    order = [d for d in DIRECTION_STYLE if d in used]
    fig.legend(handles=[Patch(facecolor=DIRECTION_STYLE[d][0], edgecolor="black", lw=0.5, label=DIRECTION_STYLE[d][1])
                        for d in order], loc="outside lower center", ncols=min(2, len(order)), fontsize=7)
    fig.suptitle(title, fontsize=9)
    mark_quick(fig, quick)
    return fig


def base_figure(cfg: StudyConfig, base: Dict[str, Any]):
    """The unscaled base beyond L0: ppl against length, and its per-position loss inside each evaluated length."""
    from matplotlib.figure import Figure
    L0 = cfg.L0
    asked = list(cfg.eval.ppl_lengths)
    values = [metric_value(base, *metric_of("ppl", n)) for n in asked]
    lengths = [n for n, v in zip(asked, values) if v is not None and math.isfinite(v)]
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ppl = [v if v is not None else math.nan for v in values]
    # a length without a value keeps its tick and breaks the line (never joined over, never left out unnamed)
    ax1.plot(asked if lengths else [], ppl if lengths else [], marker="o")
    value_axis(ax1, ppl)
    if lengths:
        length_axis(ax1, asked)
    gaps = [f"{length_label(n)}: {why_empty({'base': base}, ['base'], metric_of('ppl', n)[0], length_label(n))}"
            for n, v in zip(asked, values) if v is None or not math.isfinite(v)]
    if gaps:
        note_missing(ax1, "no perplexity at " + "; ".join(gaps), 4.5)
    ax1.set_xlabel(LENGTH_LABEL)
    ax1.set_ylabel("perplexity")
    ax1.set_title("base (unscaled RoPE): ppl against length", fontsize=9)
    nll_all: List[float] = []
    drawn = [n for n in lengths if (base.get("curves") or {}).get(str(n))]
    for i, n in enumerate(drawn):
        c = base["curves"][str(n)]
        # 4 bins per octave: the same detail at every scale of the log axis
        cuts = {int(round(2 ** (k / 4))) for k in range(4 * len(c).bit_length()) if 2 ** (k / 4) < len(c)}
        bins = list(zip(*[sorted({0, *cuts, len(c)})[i:] for i in (0, 1)]))
        ys = [statistics.fmean(c[a:b]) for a, b in bins]
        ax2.plot([(a + b) / 2 for a, b in bins], ys, label=f"{n} tokens" + positions_not_drawn(c),
                 **series_style(i, len(drawn), len(bins)))
        nll_all += ys
    value_axis(ax2, nll_all, log_span=float("inf"))
    for ax in (ax1, ax2):
        ax.axvline(L0, color="k", ls="--", lw=0.8)
    if not drawn:  # bare 0-1 axes said nothing (an audit)
        note_missing(ax2, "not drawn: the base's evaluation recorded no per-position loss at these lengths", 3.5)
    if drawn:  # plain numbers from the first point to the last position (matplotlib's own began at 1, not 0.5)
        position_axis(ax2, 0.5, max(len(base["curves"][str(n)]) for n in drawn) - 1, log2=True)
    else:
        ax2.set_xscale("log", base=2)
    ax2.set_xlabel(f"{POSITION_LABEL}; L0 dashed")
    ax2.set_ylabel("mean NLL (nats)")
    ax2.set_title("base: per-position loss", fontsize=9)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    mark_quick(fig, cfg.quick)
    return fig


def e_range_figure(cfg: StudyConfig, claim: Dict[str, Any]):
    """Table 7's bars: each other ``e`` range's perplexity minus the main range's, paired by seed (a Figure)."""
    main = e_range_text(claim["main_e_range"])  # the main grid's, as its runs' recipe config holds it
    return bars_figure(claim["comparisons"],
                       lambda c: f"e ~ {e_range_text(c['e_range'])} @ {length_label(c['length'])}",
                       f"Table 7: perplexity of other e ranges minus the main e ~ {main} "
                       f"({_paired(cfg, claim['comparisons'])})", cfg.quick)


def divergence_figure(cfg: StudyConfig, claim: Dict[str, Any]):
    """Jeffreys / JS / SCE minus CE, paired by seed: a panel of perplexity differences and one of next-token
    entropy differences (nats), never one axis for both (a Figure)."""
    return bars_figure(claim["comparisons"],
                       lambda c: f"{c['divergence']} a={c['alpha']:g} @ {length_label(c['length'])}",
                       f"Divergences minus CE: perplexity and next-token entropy "
                       f"({_paired(cfg, claim['comparisons'])})", cfg.quick)


def _paired(cfg: StudyConfig, comps: List[Dict[str, Any]]) -> str:
    """How many seeds the bars pair: their own counts (``n``), not the config's (a seed a run lacks pairs none)."""
    ns = sorted({int(c["n"]) for c in comps if c.get("mean") is not None and c.get("n")}) or [len(cfg.seeds)]
    if len(ns) == 1:
        return f"paired by seed, {seeds_text(ns[0], spread=False)}"
    return f"paired by seed, means over {ns[0]}-{ns[-1]} seeds (n per bar)"


def claim_plots(cfg: StudyConfig, analysis: Dict[str, Any], recs: Dict[str, Dict[str, Any]], rdir: Path,
                base_only: bool = False) -> List[str]:
    """The claims' figures: the base's failure, metric-vs-performance scatter, alpha curves, e-range and divergence
    bars (``base_only``: the first alone, when no fine-tune ran)."""
    made = []
    if analysis.get("base_failure"):
        save_figure(base_figure(cfg, recs["base"]), rdir / BASE_FAILURE_PLOT, dpi=110)
        made.append(BASE_FAILURE_PLOT)
    if base_only:
        return made
    claims = {c["id"]: c for c in analysis["claims"]}
    if claims["table1"].get("correlations"):
        save_figure(scatter_figure(claims["table1"], cfg, recs), rdir / SCATTER_PLOT, dpi=110)
        made.append(SCATTER_PLOT)
    if len(cfg.alphas) > 1:
        save_figure(alpha_figure(cfg, recs), rdir / ALPHA_PLOT, dpi=110)
        made.append(ALPHA_PLOT)
    if claims["table7"]["comparisons"]:
        save_figure(e_range_figure(cfg, claims["table7"]), rdir / E_RANGE_PLOT, dpi=110)
        made.append(E_RANGE_PLOT)
    if claims["divergence"]["comparisons"]:
        save_figure(divergence_figure(cfg, claims["divergence"]), rdir / DIVERGENCE_PLOT, dpi=110)
        made.append(DIVERGENCE_PLOT)
    return made
