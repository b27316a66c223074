"""The Table-1 figure: the misalignment metric (SCE, Eq. 4) against each performance figure, one panel per figure
(rows) and length (columns), every point named by its variant, Spearman's rho with its 95% interval, n and the
verdict in each title, and the variants without a point and why (not run, failed, not scored). It follows the study
figures' rules (:mod:`torchtune_longshort.plots.axes`: value axes, quick runs marked)."""

from __future__ import annotations

from typing import Any, Dict, List, Tuple

from matplotlib.figure import Figure

from torchtune_longshort.plots.axes import MARKERS, mark_quick, value_axis, wrapped_title
from torchtune_longshort.study.table1.analysis import MAIN_PREDICTOR, PREDICTORS, TARGETS, main_correlation, rho_text
from torchtune_longshort.study.table1.config import Table1Config

FIGURE = "metric_vs_performance.png"
_PANEL_IN = (4.6, 3.6)  # inches per panel (width, height)


def _why_no_points(rows: List[Dict[str, Any]], tid: str) -> str:
    """Why variants give no point on a panel: their cell did not run or failed, or it ran without that value."""
    out: Dict[str, List[str]] = {}
    for r in rows:
        if r[MAIN_PREDICTOR] is not None and r[tid] is not None:
            continue
        why = ("not run" if r["status"] == "not run" else "failed" if r["status"] != "ok"
               else "not scored")
        out.setdefault(why, []).append(r["variant"])
    return "; ".join(f"{why}: {', '.join(names)}" for why, names in out.items())


def _labels(pts: List[Tuple[str, float, float]], near: float = 0.03) -> List[Tuple[str, float, float]]:
    """One label per group of points closer than ``near`` of the panel's span on both axes (``base, ntk``), so
    that the names of points that (nearly) coincide do not print over each other."""
    span = [max(v) - min(v) or 1.0 for v in ([p[1] for p in pts] or [0.0], [p[2] for p in pts] or [0.0])]
    groups: List[List[Tuple[str, float, float]]] = []
    for p in pts:
        g = next((g for g in groups if abs(g[0][1] - p[1]) <= near * span[0] and abs(g[0][2] - p[2]) <= near * span[1]),
                 None)
        g.append(p) if g is not None else groups.append([p])
    return [(", ".join(q[0] for q in g), g[0][1], g[0][2]) for g in groups]


def figure(cfg: Table1Config, analysis: Dict[str, Any]) -> Figure:
    """The figure of :func:`~torchtune_longshort.study.table1.analysis.analyze`'s ``analysis`` (see the module
    doc); each variant keeps one colour and marker across panels."""
    entries = list(analysis["per_length"].values())
    fig = Figure(figsize=(_PANEL_IN[0] * len(entries), _PANEL_IN[1] * len(TARGETS)), layout="constrained")
    axes = fig.subplots(len(TARGETS), len(entries), squeeze=False)
    names = list(cfg.variants)
    for j, entry in enumerate(entries):
        for i, (tid, (tlabel, _, sign)) in enumerate(TARGETS.items()):
            ax = axes[i][j]
            pts = [(r["variant"], r[MAIN_PREDICTOR], r[tid]) for r in entry["rows"]
                   if r[MAIN_PREDICTOR] is not None and r[tid] is not None]
            for name, x, y in pts:
                k = names.index(name) if name in names else len(names)
                ax.scatter([x], [y], s=30, marker=MARKERS[k % len(MARKERS)], color=f"C{k % 10}")
            for label, x, y in _labels(pts):
                ax.annotate(label, (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7)
            value_axis(ax, [p[1] for p in pts], axis="x")
            value_axis(ax, [p[2] for p in pts])
            c = main_correlation(entry, tid)
            want = "claim: rho > 0" if sign > 0 else "claim: rho < 0"
            missing = _why_no_points(entry["rows"], tid)
            title = f"{tlabel} at {entry['label']}: rho {rho_text(c)}, n = {c['n']}\n({want}; {c['verdict']})"
            ax.set_title(title + ("\n" + wrapped_title(f"no point: {missing}", _PANEL_IN[0] - 0.4, 7)
                                  if missing else ""), fontsize=8)
            ax.set_xlabel(f"{PREDICTORS[MAIN_PREDICTOR][0]} at {entry['label']}", fontsize=8)
            ax.set_ylabel(tlabel, fontsize=8)
            ax.margins(0.12)
    mark_quick(fig, cfg.quick)
    return fig
