"""The study report's figures (matplotlib ``Figure`` objects, no pyplot state): lines over length, BABILong and
passkey depth x length heatmaps, the CE-only fine-tunes' held-out CE by step, per-position loss, and the claims'
scatter and bar plots.

Every figure reads right at its edges: value axes follow :func:`torchtune_longshort.eval.plot_axes.value_axis` (one
rule, near-equal values included), coinciding lines stay visible (:func:`plot_axes.series_style`), a title says
"1 seed" rather than "mean ± sd" when there is one seed (:func:`seeds_text`), and a quick (smoke) study's figures
say so (:func:`plot_axes.mark_quick`)."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Callable, Dict, List, Optional

from torchtune_longshort.eval.tasks.common.lengths import length_label
from torchtune_longshort.study.config import FAMILY_TASK, config_key, main_grid, metric_of

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
FAMILY_UNIT = {"ppl": ("perplexity", "ppl"), "entropy": ("next-token entropy", "nats")}


def seeds_text(n: int, spread: bool = True) -> str:
    """What a figure's points are, for its title: ``"mean ± sd over 3 seeds"`` (``spread=False``: ``"mean over 3
    seeds"``), or ``"1 seed"`` when there is one (a single value has no sd)."""
    if n <= 1:
        return "1 seed"
    return f"mean ± sd over {n} seeds" if spread else f"mean over {n} seeds"


def e_range_text(bounds) -> str:
    """An ``e_range`` as a reader writes it: ``[1, "L/4"]`` -> ``U[1, L/4]`` (no Python quotes)."""
    return "U[" + ", ".join(str(b) for b in bounds) + "]"


def loss_label(alpha: float) -> str:
    return "CE (alpha = 0)" if alpha == 0 else f"CE + {alpha:g} x misalignment"


def metric_value(rec: Dict[str, Any], task: str, metric: str):
    """``metric`` of ``task`` in a run's result.json (under the task's former name in older records); None when
    absent or not a number."""
    from torchtune_longshort.eval.tasks import task_results

    v = task_results(rec.get("results") or {}, task).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _mark_lengths(ax, cfg: Dict[str, Any]) -> None:
    """Dotted lines at L0 and L, labelled inside the top of the axes (never over the title or tick labels)."""
    for x, lab in ((cfg["L0"], "L0"), (cfg["L"], "L")):
        ax.axvline(x, color="grey", lw=0.8, ls=":")
        ax.text(x, 0.98, f" {lab}", transform=ax.get_xaxis_transform(), ha="left", va="top", fontsize=8,
                color="grey")


def line_figure(cfg: Dict[str, Any], table: Dict[str, Any], lengths: List[int], ylabel: str):
    """One panel per method: the table's mean ± sd against length (a plain value at one seed), one line per loss
    row (a Figure).

    Lengths get one labelled tick each; the value axis is log only when the values span a decade, with plain
    tick labels and no offset text (:mod:`torchtune_longshort.eval.plot_axes`)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import length_axis, mark_quick, series_style, value_axis

    methods = list(table["methods"])
    fig = Figure(figsize=(5 * len(methods), 4), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False)
    for ax, m in zip(axes[0], methods):
        ys_all: List[float] = []
        rows = table["methods"][m]
        for i, row in enumerate(rows):
            ys = [row["cells"][length_label(n)]["mean"] for n in lengths]
            es = [row["cells"][length_label(n)]["sd"] or 0.0 for n in lengths]
            pts = [(x, y, e) for x, y, e in zip(lengths, ys, es) if y is not None]
            if pts:
                style = series_style(i, len(rows), len(lengths))
                if row["alpha"] is None:  # the base: a reference, not one of the compared losses
                    style["linestyle"] = (0, (5, 2))
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], capsize=3,
                            label=row["label"] if row["alpha"] is not None else "base (reference)", **style)
                ys_all += [p[1] - p[2] for p in pts] + [p[1] + p[2] for p in pts]
        length_axis(ax, list(lengths) + [cfg["L0"], cfg["L"]])
        value_axis(ax, ys_all)
        _mark_lengths(ax, cfg)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{m}: {seeds_text(len(cfg['seeds']))}")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no successful run", transform=ax.transAxes, ha="center", va="center")
    mark_quick(fig, cfg.get("quick", False))
    return fig


def depth_length_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]], lengths: List[Any], depths: List[int],
                        cell, label: str, chance: Optional[float] = None, chance_text: str = ""):
    """A depth x length heatmap per method x alpha of the main grid (a Figure): ``cell(rec, length, depth)`` is one
    run's score or None, averaged over seeds; a single length or depth keeps readable cells and titles.

    ``chance``: the score of guessing (drawn as a red line on the colour bar, named in its label and in the title
    with ``chance_text``, e.g. "random digits"); None when the task has no meaningful chance level."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import heatmap_size, mark_quick, wrapped_title

    combos = [(m, a) for m in cfg["methods"] for a in cfg["alphas"]]
    w, h = heatmap_size(len(lengths), len(depths), extra=(1.4, 1.4), min_size=(2.6, 2.2))
    width = w * len(cfg["alphas"]) + 1.0
    fig = Figure(figsize=(width, h * len(cfg["methods"]) + 0.5), layout="constrained")
    axes = fig.subplots(len(cfg["methods"]), len(cfg["alphas"]), squeeze=False)
    im = None
    for (m, a), ax in zip(combos, axes.flatten()):
        keys = [r["key"] for r in main_grid(cfg) if r["method"] == m and r["alpha"] == a and recs[r["key"]].get("status") == "ok"]
        grid_v = []
        for d in depths:
            row = []
            for n in lengths:
                vals = [v for k in keys if (v := cell(recs[k], n, d)) is not None]
                row.append(statistics.fmean(vals) if vals else float("nan"))
            grid_v.append(row)
        im = ax.imshow(grid_v, vmin=0, vmax=1, cmap="viridis", aspect="auto")
        ax.set_xticks(range(len(lengths)), [n if isinstance(n, str) else length_label(n) for n in lengths])
        ax.set_yticks(range(len(depths)), [f"{d}%" for d in depths])
        for i, row in enumerate(grid_v):
            for j, v in enumerate(row):
                ax.text(j, i, "—" if math.isnan(v) else f"{v:.2f}", ha="center", va="center",
                        color="w" if math.isnan(v) or v < 0.6 else "k", fontsize=8)
        ax.set_title(f"{m}, alpha={a:g}", fontsize=9)
        ax.set_xlabel("length")
        ax.set_ylabel("depth")
    cbar = fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8,
                        label=label + (f"\n(red line: chance {chance:g})" if chance is not None else ""))
    title = f"{label}, {seeds_text(len(cfg['seeds']), spread=False)}"
    if chance is not None:
        cbar.ax.axhline(chance, color="red", lw=2.5)
        title += f"; chance level ({chance_text}) {chance:g}" if chance_text else f"; chance level {chance:g}"
    fig.suptitle(wrapped_title(title, width, fontsize=10), fontsize=10)
    mark_quick(fig, cfg.get("quick", False))
    return fig


def babilong_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """BABILong depth x length: mean over seeds and QA tasks of ``acc_<len>_d<depth>`` (fact depth). No chance
    line: the answers are free-form words, so guessing has no fixed score."""
    bab = cfg["eval"]["babilong"]
    return depth_length_figure(cfg, recs, bab["lengths"], bab["depths"],
                               lambda rec, lab, d: metric_value(rec, *metric_of("babilong", lab, depth=d)),
                               "BABILong accuracy")


def passkey_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """Passkey depth x length: mean over seeds of the digits in place, ``digits_<len>_d<depth>`` (key depth), with
    the score of random digits (:data:`torchtune_longshort.eval.tasks.passkey.task.DIGITS_CHANCE`) marked."""
    from torchtune_longshort.eval.tasks.passkey.task import DEFAULT_DEPTHS, DIGITS_CHANCE

    ev = cfg["eval"]
    depths = list((ev.get("metadata") or {}).get("passkey_depths", DEFAULT_DEPTHS))
    return depth_length_figure(cfg, recs, ev["passkey_lengths"], depths,
                               lambda rec, n, d: metric_value(rec, *metric_of("passkey_digits", n, depth=d)),
                               "passkey digits in place", chance=DIGITS_CHANCE, chance_text="random digits")


def finetune_curve_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """Held-out CE against step of every CE-only fine-tune (alpha = 0), one line per seed, a panel per method:
    whether the fine-tuning budget let cross-entropy converge (a Figure)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import mark_quick, series_style, value_axis

    methods = list(cfg["methods"])
    fig = Figure(figsize=(4.5 * len(methods), 3.6), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False, sharey=True)
    ys_all: List[float] = []
    for ax, m in zip(axes[0], methods):
        runs = [(r, val) for r in main_grid(cfg) if r["method"] == m and r["alpha"] == 0
                and (val := ((recs.get(r["key"]) or {}).get("train") or {}).get("val_ce"))]
        for i, (r, val) in enumerate(runs):
            ax.plot([s for s, _ in val], [v for _, v in val], label=f"seed {r['seed']}",
                    **series_style(i, len(runs), len(val)))
            ys_all += [v for _, v in val]
        ax.set_xlabel("fine-tuning step")
        ax.set_title(f"{m}: CE-only, held-out CE at L = {cfg['L']}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    value_axis(axes[0][0], ys_all)  # the panels share it
    axes[0][0].set_ylabel("held-out CE (nats)")
    mark_quick(fig, cfg.get("quick", False))
    return fig


def curve_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]], longest: str):
    """Per-position mean NLL at the longest ppl length, mean over seeds, one line per alpha (a Figure)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import mark_quick, series_style, value_axis

    methods = list(cfg["methods"])
    fig = Figure(figsize=(5 * len(methods), 4), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False)
    for ax, m in zip(axes[0], methods):
        ys_all: List[float] = []
        for k, a in enumerate(cfg["alphas"]):
            curves = [recs[r["key"]]["curves"][longest] for r in main_grid(cfg) if r["method"] == m and r["alpha"] == a
                      and recs[r["key"]].get("status") == "ok" and longest in (recs[r["key"]].get("curves") or {})]
            if curves:
                n = min(map(len, curves))
                ys = [statistics.fmean(c[i] for c in curves) for i in range(n)]
                w = max(1, n // 64)  # smooth over w positions so the lines can be told apart
                ys_s = [statistics.fmean(ys[i:i + w]) for i in range(0, n, w)]
                ax.plot([i + w / 2 for i in range(0, n, w)], ys_s, label=loss_label(a),
                        **series_style(k, len(cfg["alphas"]), len(ys_s)))
                ys_all += ys_s
        value_axis(ax, ys_all, log_span=float("inf"))
        _mark_lengths(ax, cfg)
        ax.set_xlabel("position")
        ax.set_ylabel("mean NLL (nats)")
        ax.set_title(f"{m}: per-position loss at {longest} tokens, {seeds_text(len(cfg['seeds']), spread=False)}",
                     fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    mark_quick(fig, cfg.get("quick", False))
    return fig


def write_plots(cfg: Dict[str, Any], tables: Dict[str, Any], recs: Dict[str, Dict[str, Any]], rdir: Path) -> List[str]:
    """Save every figure the tables and records support under ``rdir``; returns the file names."""
    made = []
    ev = cfg["eval"]
    for tid, field, ylabel, name in (("ppl", "ppl_lengths", "perplexity", "ppl_vs_length.png"),
                                     ("misalignment", "misalignment_lengths", "misalignment (SCE, Eq. 4)",
                                      "misalignment_vs_length.png")):
        if tables.get(tid):
            line_figure(cfg, tables[tid], ev[field], ylabel).savefig(rdir / name, dpi=110)
            made.append(name)
    bab = ev.get("babilong")
    if bab and bab.get("lengths") and bab.get("depths"):
        babilong_figure(cfg, recs).savefig(rdir / "babilong_depth_length.png", dpi=110)
        made.append("babilong_depth_length.png")
    if ev.get("passkey_lengths") and any(FAMILY_TASK["passkey"] in (r.get("results") or {}) for r in recs.values()):
        passkey_figure(cfg, recs).savefig(rdir / "passkey_depth_length.png", dpi=110)
        made.append("passkey_depth_length.png")
    if any((r.get("train") or {}).get("val_ce") for k, r in recs.items() if k != "base"):
        finetune_curve_figure(cfg, recs).savefig(rdir / "finetune_convergence.png", dpi=110)
        made.append("finetune_convergence.png")
    longest = str(max(ev["ppl_lengths"]))
    if any(longest in (r.get("curves") or {}) for r in recs.values()):
        curve_figure(cfg, recs, longest).savefig(rdir / "per_position_loss.png", dpi=110)
        made.append("per_position_loss.png")
    return made


# ---------------------------------------------------------------------------------------------- the claims' plots
def scatter_figure(table1: Dict[str, Any], cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """Table 1: every checkpoint's misalignment at L and training CE against its perplexity at the longest length.

    Both axes of both panels are value axes (:func:`plot_axes.value_axis`): plain, short tick labels that never run
    into each other, even when a quick study's values agree to the fourth decimal."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import MARKERS, mark_quick, value_axis
    from torchtune_longshort.study.claims import train_ce
    from torchtune_longshort.study.records import value

    top, L = max(n for n in cfg["eval"]["ppl_lengths"]), cfg["L"]
    keys = [k for k, r in recs.items() if k != "base" and r.get("status") == "ok"]
    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, (name, getx) in zip(axes, ((f"misalignment (Eq. 4) at {length_label(L)}",
                                        lambda r: value(r, "misalignment", L)),
                                       ("training CE (last steps)", train_ce))):
        xs_all: List[float] = []
        ys_all: List[float] = []
        for i, m in enumerate(cfg["methods"]):
            pts = [(getx(recs[k]), value(recs[k], "ppl", top)) for k in keys if recs[k].get("method") == m]
            pts = [p for p in pts if None not in p]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=m, s=22, marker=MARKERS[i % len(MARKERS)],
                       color=f"C{i % 10}", alpha=0.8)
            xs_all += [p[0] for p in pts]
            ys_all += [p[1] for p in pts]
        value_axis(ax, xs_all, axis="x")
        value_axis(ax, ys_all)
        row = next((r for r in table1.get("correlations", []) if r["predictor"] == name
                    and r["target"] == f"ppl at {length_label(top)}"), None)
        rho = f" (Spearman {row['spearman']:.2f})" if row and row.get("spearman") is not None else ""
        ax.set_xlabel(name)
        ax.set_ylabel(f"perplexity at {length_label(top)}")
        ax.set_title(f"{name}{rho}, {len(xs_all)} checkpoints", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    mark_quick(fig, cfg.get("quick", False))
    return fig


def alpha_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """Perplexity against alpha at each length >= L, one panel per method (mean ± sd over seeds; a plain value at
    one seed)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import mark_quick, series_style, value_axis
    from torchtune_longshort.study.claims import by_seed, long_lengths

    methods = list(cfg["methods"])
    fig = Figure(figsize=(4.5 * len(methods), 3.6), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False)
    lengths = long_lengths(cfg)
    for ax, m in zip(axes[0], methods):
        ys_all: List[float] = []
        for i, n in enumerate(lengths):
            pts = []
            for a in cfg["alphas"]:
                vals = list(by_seed(cfg, recs, config_key(m, a), "ppl", n).values())
                if vals:
                    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                    pts.append((a, statistics.fmean(vals), sd))
            if pts:
                ax.errorbar(range(len(pts)), [p[1] for p in pts], yerr=[p[2] for p in pts], capsize=3,
                            label=f"ppl {length_label(n)}", **series_style(i, len(lengths), len(pts)))
                ax.set_xticks(range(len(pts)), [f"{p[0]:g}" for p in pts])
                ys_all += [p[1] - p[2] for p in pts] + [p[1] + p[2] for p in pts]
        value_axis(ax, ys_all)
        ax.set_xlabel("alpha")
        ax.set_ylabel("perplexity")
        ax.set_title(f"{m}: {seeds_text(len(cfg['seeds']))}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    mark_quick(fig, cfg.get("quick", False))
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

    from torchtune_longshort.eval.plot_axes import mark_quick, value_axis
    from torchtune_longshort.study.stats import direction

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
        for y, c in zip(ys, fr):
            d = c.get("direction") or direction(c, True if fam == "ppl" else None)
            d = d if d in DIRECTION_STYLE else "unknown"
            used.append(d)
            ax.barh(y, c["mean"], color=DIRECTION_STYLE[d][0], edgecolor="black", lw=0.5, height=0.7)
            xs.append(c["mean"])
            if c.get("lo") is not None and c.get("hi") is not None:
                err = [[max(0.0, c["mean"] - c["lo"])], [max(0.0, c["hi"] - c["mean"])]]
                ax.errorbar(c["mean"], y, xerr=err, fmt="o", ms=3, color="black", capsize=3, lw=1)
                xs += [c["lo"], c["hi"]]
            else:  # the mean alone still shows where a bar too short to see ends
                ax.plot([c["mean"]], [y], "o", ms=3, color="black")
        ax.set_yticks(ys, [label_key(c) for c in fr], fontsize=7)
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


def base_figure(cfg: Dict[str, Any], base: Dict[str, Any]):
    """The unscaled base beyond L0: ppl against length, and its per-position loss inside each evaluated length."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import length_axis, mark_quick, series_style, value_axis

    L0 = cfg["L0"]
    lengths = [n for n in cfg["eval"]["ppl_lengths"] if metric_value(base, *metric_of("ppl", n)) is not None]
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ppl = [metric_value(base, *metric_of("ppl", n)) for n in lengths]
    ax1.plot(lengths, ppl, marker="o")
    value_axis(ax1, ppl)
    if lengths:
        length_axis(ax1, lengths)
    ax1.set_xlabel("sequence length (tokens)")
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
        ax2.plot([(a + b) / 2 for a, b in bins], ys, label=f"{n} tokens", **series_style(i, len(drawn), len(bins)))
        nll_all += ys
    value_axis(ax2, nll_all, log_span=float("inf"))
    for ax in (ax1, ax2):
        ax.axvline(L0, color="k", ls="--", lw=0.8)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("position (L0 dashed)")
    ax2.set_ylabel("mean NLL (nats)")
    ax2.set_title("base: per-position loss", fontsize=9)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    mark_quick(fig, cfg.get("quick", False))
    return fig


def e_range_figure(cfg: Dict[str, Any], claim: Dict[str, Any]):
    """Table 7's bars: each other ``e`` range's perplexity minus the main range's, paired by seed (a Figure)."""
    from torchtune_longshort.windows import DEFAULT_E_RANGE

    main = e_range_text(cfg["finetune"].get("overrides", {}).get("e_range", DEFAULT_E_RANGE))
    return bars_figure(claim["comparisons"],
                       lambda c: f"e ~ {e_range_text(c['e_range'])} @ {length_label(c['length'])}",
                       f"Table 7: perplexity of other e ranges minus the main e ~ {main} ({_paired(cfg)})",
                       cfg.get("quick", False))


def divergence_figure(cfg: Dict[str, Any], claim: Dict[str, Any]):
    """Jeffreys / JS / SCE minus CE, paired by seed: a panel of perplexity differences and one of next-token
    entropy differences (nats), never one axis for both (a Figure)."""
    return bars_figure(claim["comparisons"],
                       lambda c: f"{c['divergence']} a={c['alpha']:g} @ {length_label(c['length'])}",
                       f"Divergences minus CE: perplexity and next-token entropy ({_paired(cfg)})",
                       cfg.get("quick", False))


def _paired(cfg: Dict[str, Any]) -> str:
    return f"paired by seed, {seeds_text(len(cfg['seeds']), spread=False)}"


def claim_plots(cfg: Dict[str, Any], analysis: Dict[str, Any], recs: Dict[str, Dict[str, Any]], rdir: Path,
                base_only: bool = False) -> List[str]:
    """The claims' figures: the base's failure, metric-vs-performance scatter, alpha curves, e-range and divergence
    bars (``base_only``: the first alone, when no fine-tune ran)."""
    made = []
    if analysis.get("base_failure"):
        base_figure(cfg, recs["base"]).savefig(rdir / "base_failure.png", dpi=110)
        made.append("base_failure.png")
    if base_only:
        return made
    claims = {c["id"]: c for c in analysis["claims"]}
    if claims["table1"].get("correlations"):
        scatter_figure(claims["table1"], cfg, recs).savefig(rdir / "metric_vs_performance.png", dpi=110)
        made.append("metric_vs_performance.png")
    if len(cfg["alphas"]) > 1:
        alpha_figure(cfg, recs).savefig(rdir / "alpha_curves.png", dpi=110)
        made.append("alpha_curves.png")
    if claims["table7"]["comparisons"]:
        e_range_figure(cfg, claims["table7"]).savefig(rdir / "e_range_bars.png", dpi=110)
        made.append("e_range_bars.png")
    if claims["divergence"]["comparisons"]:
        divergence_figure(cfg, claims["divergence"]).savefig(rdir / "divergence_bars.png", dpi=110)
        made.append("divergence_bars.png")
    return made


def redraw_report(cfg: Dict[str, Any], report_dir: Path) -> List[str]:
    """Redraw every figure of a finished report folder from the run records it holds (``runs/<key>/result.json``,
    the base's in ``runs/base``), as :func:`torchtune_longshort.study.report.build_report` draws them, leaving
    report.md, summary.json and the records untouched; returns the file names written.

    ``python -m torchtune_longshort.study.figures --config configs/study/<name>.yaml --report docs/study/<name>``:
    a change to these figures reaches a committed report without re-running or re-writing it."""
    import json

    from torchtune_longshort.study.claims import analyze
    from torchtune_longshort.study.config import grid
    from torchtune_longshort.study.report import _tables
    from torchtune_longshort.study.runner import RESULT

    rdir = Path(report_dir)
    recs: Dict[str, Dict[str, Any]] = {}
    for key in ["base"] + [r["key"] for r in grid(cfg)]:
        p = rdir / "runs" / key / RESULT
        recs[key] = json.loads(p.read_text()) if p.is_file() else {"key": key, "status": "not run"}
    analysis = analyze(cfg, recs)
    if any(r.get("status") == "ok" for k, r in recs.items() if k != "base"):
        return write_plots(cfg, _tables(cfg, recs), recs, rdir) + claim_plots(cfg, analysis, recs, rdir)
    return claim_plots(cfg, analysis, recs, rdir, base_only=True)


def main(argv=None) -> int:
    """``python -m torchtune_longshort.study.figures --config CONFIG --report DIR [--quick]``: :func:`redraw_report`."""
    import argparse

    from torchtune_longshort.study.config import load_study_config

    p = argparse.ArgumentParser(prog="python -m torchtune_longshort.study.figures",
                                description="Redraw a study report's figures from the run records in its folder.")
    p.add_argument("--config", required=True, help="the study YAML the report was made with")
    p.add_argument("--report", required=True, help="the report folder (report.md, runs/<key>/result.json)")
    p.add_argument("--quick", action="store_true", help="the report is of the config's --quick variant")
    p.add_argument("--repo-root", default=".", help="folder holding configs/ and recipes/")
    a = p.parse_args(argv)
    root = Path(a.repo_root).resolve()
    cfg = load_study_config(root / a.config if not Path(a.config).is_absolute() else a.config, quick=a.quick,
                            repo_root=root)
    made = redraw_report(cfg, Path(a.report))
    print(f"redrew {len(made)} figure(s) in {a.report}: {', '.join(made)}")
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main())
