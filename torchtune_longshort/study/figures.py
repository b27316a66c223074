"""The study report's figures (matplotlib ``Figure`` objects, no pyplot state): lines over length, BABILong and
passkey depth x length heatmaps, the CE-only fine-tunes' held-out CE by step, per-position loss, and the claims'
scatter and bar plots."""

from __future__ import annotations

import math
import statistics
from pathlib import Path
from typing import Any, Dict, List

from torchtune_longshort.eval.lengths import length_label
from torchtune_longshort.study.config import FAMILY_TASK, config_key, main_grid, metric_of


def loss_label(alpha: float) -> str:
    return "CE (alpha = 0)" if alpha == 0 else f"CE + {alpha:g} x misalignment"


def metric_value(rec: Dict[str, Any], task: str, metric: str):
    v = (rec.get("results") or {}).get(task, {}).get(metric)
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def _mark_lengths(ax, cfg: Dict[str, Any]) -> None:
    """Dotted lines at L0 and L, labelled inside the top of the axes (never over the title or tick labels)."""
    for x, lab in ((cfg["L0"], "L0"), (cfg["L"], "L")):
        ax.axvline(x, color="grey", lw=0.8, ls=":")
        ax.text(x, 0.98, f" {lab}", transform=ax.get_xaxis_transform(), ha="left", va="top", fontsize=8,
                color="grey")


def line_figure(cfg: Dict[str, Any], table: Dict[str, Any], lengths: List[int], ylabel: str):
    """One panel per method: the table's mean ± sd against length, one line per loss row (a Figure).

    Lengths get one labelled tick each; the value axis is log only when the values span a decade, with plain
    tick labels and no offset text (:mod:`torchtune_longshort.eval.plot_axes`)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import length_axis, value_axis

    methods = list(table["methods"])
    fig = Figure(figsize=(5 * len(methods), 4), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False)
    for ax, m in zip(axes[0], methods):
        ys_all: List[float] = []
        for row in table["methods"][m]:
            ys = [row["cells"][length_label(n)]["mean"] for n in lengths]
            es = [row["cells"][length_label(n)]["sd"] or 0.0 for n in lengths]
            pts = [(x, y, e) for x, y, e in zip(lengths, ys, es) if y is not None]
            if pts:
                ax.errorbar([p[0] for p in pts], [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o",
                            capsize=3, label=row["label"] if row["alpha"] is not None else "base (reference)",
                            linestyle="--" if row["alpha"] is None else "-")
                ys_all += [p[1] - p[2] for p in pts] + [p[1] + p[2] for p in pts]
        length_axis(ax, list(lengths) + [cfg["L0"], cfg["L"]])
        value_axis(ax, ys_all)
        _mark_lengths(ax, cfg)
        ax.set_xlabel("sequence length (tokens)")
        ax.set_ylabel(ylabel)
        ax.set_title(f"{m}: mean ± sd over seeds")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
        else:
            ax.text(0.5, 0.5, "no successful run", transform=ax.transAxes, ha="center", va="center")
    return fig


def depth_length_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]], lengths: List[Any], depths: List[int],
                        cell, label: str):
    """A depth x length heatmap per method x alpha of the main grid (a Figure): ``cell(rec, length, depth)`` is one
    run's score or None, averaged over seeds; a single length or depth keeps readable cells and titles."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import heatmap_size

    combos = [(m, a) for m in cfg["methods"] for a in cfg["alphas"]]
    w, h = heatmap_size(len(lengths), len(depths), extra=(1.4, 1.4), min_size=(2.6, 2.2))
    fig = Figure(figsize=(w * len(cfg["alphas"]) + 1.0, h * len(cfg["methods"])), layout="constrained")
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
                ax.text(j, i, "—" if math.isnan(v) else f"{v:.2f}", ha="center", va="center", color="w", fontsize=8)
        ax.set_title(f"{m}, alpha={a:g}", fontsize=9)
        ax.set_xlabel("length")
        ax.set_ylabel("depth")
    fig.colorbar(im, ax=axes.ravel().tolist(), shrink=0.8, label=label)
    return fig


def babilong_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """BABILong depth x length: mean over seeds and QA tasks of ``acc_<len>_d<depth>`` (fact depth)."""
    bab = cfg["eval"]["babilong"]
    return depth_length_figure(cfg, recs, bab["lengths"], bab["depths"],
                               lambda rec, lab, d: metric_value(rec, *metric_of("babilong", lab, depth=d)),
                               "BABILong accuracy")


def passkey_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """Passkey depth x length: mean over seeds of the digits in place, ``digits_<len>_d<depth>`` (key depth)."""
    from torchtune_longshort.eval.passkey import DEFAULT_DEPTHS

    ev = cfg["eval"]
    depths = list((ev.get("metadata") or {}).get("passkey_depths", DEFAULT_DEPTHS))
    return depth_length_figure(cfg, recs, ev["passkey_lengths"], depths,
                               lambda rec, n, d: metric_value(rec, *metric_of("passkey_digits", n, depth=d)),
                               "passkey digits in place")


def finetune_curve_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """Held-out CE against step of every CE-only fine-tune (alpha = 0), one line per seed, a panel per method:
    whether the fine-tuning budget let cross-entropy converge (a Figure)."""
    from matplotlib.figure import Figure

    methods = list(cfg["methods"])
    fig = Figure(figsize=(4.5 * len(methods), 3.6), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False, sharey=True)
    for ax, m in zip(axes[0], methods):
        for r in main_grid(cfg):
            val = ((recs.get(r["key"]) or {}).get("train") or {}).get("val_ce")
            if r["method"] == m and r["alpha"] == 0 and val:
                ax.plot([s for s, _ in val], [v for _, v in val], marker="o", ms=3, label=f"seed {r['seed']}")
        ax.set_xlabel("fine-tuning step")
        ax.set_title(f"{m}: CE-only, held-out CE at L = {cfg['L']}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel("held-out CE (nats)")
    return fig


def curve_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]], longest: str):
    """Per-position mean NLL at the longest ppl length, mean over seeds, one line per alpha (a Figure)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.eval.plot_axes import value_axis

    methods = list(cfg["methods"])
    fig = Figure(figsize=(5 * len(methods), 4), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False)
    for ax, m in zip(axes[0], methods):
        ys_all: List[float] = []
        for a in cfg["alphas"]:
            curves = [recs[r["key"]]["curves"][longest] for r in main_grid(cfg) if r["method"] == m and r["alpha"] == a
                      and recs[r["key"]].get("status") == "ok" and longest in (recs[r["key"]].get("curves") or {})]
            if curves:
                n = min(map(len, curves))
                ys = [statistics.fmean(c[i] for c in curves) for i in range(n)]
                w = max(1, n // 64)  # smooth over w positions so the lines can be told apart
                ys_s = [statistics.fmean(ys[i:i + w]) for i in range(0, n, w)]
                ax.plot([i + w / 2 for i in range(0, n, w)], ys_s, label=loss_label(a))
                ys_all += ys_s
        value_axis(ax, ys_all, log_span=float("inf"))
        _mark_lengths(ax, cfg)
        ax.set_xlabel("position")
        ax.set_ylabel("mean NLL (nats)")
        ax.set_title(f"{m}: per-position loss at {longest} tokens")
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
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
    """Table 1: every checkpoint's misalignment at L and training CE against its perplexity at the longest length."""
    from matplotlib.figure import Figure

    from torchtune_longshort.study.claims import train_ce
    from torchtune_longshort.study.records import value

    top, L = max(n for n in cfg["eval"]["ppl_lengths"]), cfg["L"]
    keys = [k for k, r in recs.items() if k != "base" and r.get("status") == "ok"]
    fig = Figure(figsize=(10, 4), layout="constrained")
    axes = fig.subplots(1, 2)
    for ax, (name, getx) in zip(axes, ((f"misalignment (Eq. 4) at {length_label(L)}",
                                        lambda r: value(r, "misalignment", L)),
                                       ("training CE (last steps)", train_ce))):
        for m in cfg["methods"]:
            pts = [(getx(recs[k]), value(recs[k], "ppl", top)) for k in keys if recs[k].get("method") == m]
            pts = [p for p in pts if None not in p]
            ax.scatter([p[0] for p in pts], [p[1] for p in pts], label=m, s=18)
        row = next((r for r in table1.get("correlations", []) if r["predictor"] == name
                    and r["target"] == f"ppl at {length_label(top)}"), None)
        rho = f" (Spearman {row['spearman']:.2f})" if row and row.get("spearman") is not None else ""
        ax.set_xlabel(name)
        ax.set_ylabel(f"perplexity at {length_label(top)}")
        ax.set_title(f"{name}{rho}", fontsize=9)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return fig


def alpha_figure(cfg: Dict[str, Any], recs: Dict[str, Dict[str, Any]]):
    """Perplexity against alpha at each length >= L, one panel per method (mean ± sd over seeds)."""
    from matplotlib.figure import Figure

    from torchtune_longshort.study.claims import by_seed, long_lengths

    methods = list(cfg["methods"])
    fig = Figure(figsize=(4.5 * len(methods), 3.6), layout="constrained")
    axes = fig.subplots(1, len(methods), squeeze=False)
    for ax, m in zip(axes[0], methods):
        for n in long_lengths(cfg):
            pts = []
            for a in cfg["alphas"]:
                vals = list(by_seed(cfg, recs, config_key(m, a), "ppl", n).values())
                if vals:
                    sd = statistics.stdev(vals) if len(vals) > 1 else 0.0
                    pts.append((a, statistics.fmean(vals), sd))
            if pts:
                ax.errorbar(range(len(pts)), [p[1] for p in pts], yerr=[p[2] for p in pts], marker="o", capsize=3,
                            label=f"ppl {length_label(n)}")
                ax.set_xticks(range(len(pts)), [f"{p[0]:g}" for p in pts])
        ax.set_xlabel("alpha")
        ax.set_ylabel("perplexity")
        ax.set_yscale("log")
        ax.set_title(m)
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize=7)
    return fig


def bars_figure(comps: List[Dict[str, Any]], label_key, title: str):
    """Paired differences against a reference (mean and 95% interval) as horizontal bars, one per comparison."""
    from matplotlib.figure import Figure

    rows = [c for c in comps if c.get("mean") is not None]
    fig = Figure(figsize=(7, 0.4 * max(3, len(rows)) + 1.2), layout="constrained")
    ax = fig.subplots()
    ys = list(range(len(rows)))
    ax.barh(ys, [c["mean"] for c in rows], color=["tab:green" if c["mean"] < 0 else "tab:red" for c in rows])
    for y, c in zip(ys, rows):
        if c.get("lo") is not None:
            ax.plot([c["lo"], c["hi"]], [y, y], color="black", lw=1)
    ax.set_yticks(ys, [label_key(c) for c in rows], fontsize=7)
    ax.axvline(0, color="grey", lw=0.8)
    ax.set_xlabel("paired difference (mean, 95% CI); negative = lower")
    ax.set_title(title, fontsize=9)
    return fig


def base_figure(cfg: Dict[str, Any], base: Dict[str, Any]):
    """The unscaled base beyond L0: ppl against length, and its per-position loss inside each evaluated length."""
    from matplotlib.figure import Figure

    L0 = cfg["L0"]
    lengths = [n for n in cfg["eval"]["ppl_lengths"] if metric_value(base, *metric_of("ppl", n)) is not None]
    fig = Figure(figsize=(10, 4), layout="constrained")
    ax1, ax2 = fig.subplots(1, 2)
    ax1.plot(lengths, [metric_value(base, *metric_of("ppl", n)) for n in lengths], marker="o")
    ax1.set_xscale("log", base=2)
    ax1.set_xlabel("sequence length (tokens)")
    ax1.set_ylabel("perplexity")
    ax1.set_title("base (unscaled RoPE): ppl against length", fontsize=9)
    for n in lengths:
        c = (base.get("curves") or {}).get(str(n))
        if not c:
            continue
        # 4 bins per octave: the same detail at every scale of the log axis
        cuts = {int(round(2 ** (k / 4))) for k in range(4 * len(c).bit_length()) if 2 ** (k / 4) < len(c)}
        bins = list(zip(*[sorted({0, *cuts, len(c)})[i:] for i in (0, 1)]))
        ax2.plot([(a + b) / 2 for a, b in bins], [statistics.fmean(c[a:b]) for a, b in bins], label=f"{n} tokens",
                 marker=".")
    for ax in (ax1, ax2):
        ax.axvline(L0, color="k", ls="--", lw=0.8)
    ax2.set_xscale("log", base=2)
    ax2.set_xlabel("position (L0 dashed)")
    ax2.set_ylabel("mean NLL (nats)")
    ax2.set_title("base: per-position loss", fontsize=9)
    if ax2.get_legend_handles_labels()[0]:
        ax2.legend(fontsize=7)
    return fig


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
        bars_figure(claims["table7"]["comparisons"], lambda c: f"e~U{c['e_range']} @ {length_label(c['length'])}",
                    "Table 7: perplexity against the main e range").savefig(rdir / "e_range_bars.png", dpi=110)
        made.append("e_range_bars.png")
    if claims["divergence"]["comparisons"]:
        bars_figure(claims["divergence"]["comparisons"],
                    lambda c: f"{c['divergence']} a={c['alpha']:g}: {c['family']} @ {length_label(c['length'])}",
                    "Divergences against CE: perplexity and entropy").savefig(rdir / "divergence_bars.png", dpi=110)
        made.append("divergence_bars.png")
    return made
