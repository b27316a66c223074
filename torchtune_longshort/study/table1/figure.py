"""The Table-1 figure: the misalignment metric (SCE, Eq. 4) against each performance figure, one panel per figure
(rows) and length (columns), every variant in one key under the panels (its own marker and colour: the variants
cluster, and names printed beside the points ran into each other; open markers, which overlay without hiding one
another, and the variants whose points still make one blot named in the title, "on one spot: ..."), Spearman's rho
with its 95% interval, n and the verdict in each title, and the variants without a point and why (not run, failed,
not scored and the kind of reason: the text could not fill the length, no data, ...). It follows the study figures'
rules (:mod:`torchtune_longshort.plots.axes`: value axes, quick runs marked)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Dict, List

if TYPE_CHECKING:
    from matplotlib.figure import Figure

from torchtune_longshort.plots.axes import MARKERS, mark_quick, overlapping, value_axis
from torchtune_longshort.plots.panels import wrapped_title
from torchtune_longshort.study.table1.analysis import MAIN_PREDICTOR, PREDICTORS, TARGETS, main_correlation, rho_text
from torchtune_longshort.study.table1.config import Table1Config

FIGURE = "metric_vs_performance.png"
_PANEL_IN = (4.6, 3.6)  # inches per panel (width, height)
# names in one row of the key per column of panels: 8 in one row ran off both sides of a one-length figure
# (`ntk_by_parts`, `dynamic_ntk`: the 2026-12-07 12k report's key began at "pi" and ended at "ntk_by")
_KEY_PER_PANEL = 4


def _why_no_points(rows: List[Dict[str, Any]], tid: str) -> str:
    """Why variants give no point on a panel: their cell did not run or failed, or it ran without that value."""
    out: Dict[str, List[str]] = {}
    for r in rows:
        if r[MAIN_PREDICTOR] is not None and r[tid] is not None:
            continue
        # the kind of reason and its first words (not scored: the text could not fill the length), no details
        why = ": ".join((r["why"].get(MAIN_PREDICTOR) or r["why"].get(tid) or "not scored").split(": ")[:2])
        out.setdefault(why, []).append(r["variant"])
    return "; ".join(f"{why}: {', '.join(names)}" for why, names in out.items())


def figure(cfg: Table1Config, analysis: Dict[str, Any]) -> Figure:
    """The figure of :func:`~torchtune_longshort.study.table1.analysis.analyze`'s ``analysis`` (see the module
    doc); each variant keeps one colour and marker across panels."""
    entries = list(analysis["per_length"].values())
    from matplotlib.figure import Figure  # here, not at import: importing matplotlib writes its font cache under
    # HOME, and a refused Table 1 (which imports this module to check --report-dir) leaves nothing
    fig = Figure(figsize=(_PANEL_IN[0] * len(entries), _PANEL_IN[1] * len(TARGETS)), layout="constrained")
    axes = fig.subplots(len(TARGETS), len(entries), squeeze=False)
    names = list(cfg.variants)
    handles: Dict[str, Any] = {}
    for j, entry in enumerate(entries):
        for i, (tid, (tlabel, _, sign)) in enumerate(TARGETS.items()):
            ax = axes[i][j]
            pts = [(r["variant"], r[MAIN_PREDICTOR], r[tid]) for r in entry["rows"]
                   if r[MAIN_PREDICTOR] is not None and r[tid] is not None]
            for name, x, y in pts:
                handles.setdefault(name, ax.scatter([x], [y], s=30, alpha=0.85, **_style(names, name)))
            value_axis(ax, [p[1] for p in pts], axis="x", margin=0.06)  # room for a marker on an end tick
            value_axis(ax, [p[2] for p in pts], margin=0.06)
            c = main_correlation(entry, tid)
            want = "claim: rho > 0" if sign > 0 else "claim: rho < 0"
            missing = _why_no_points(entry["rows"], tid)
            title = f"{tlabel} at {entry['label']}: rho {rho_text(c)}, n = {c['n']}\n({want}; {c['verdict']})"
            over = "; ".join(", ".join(sorted(g, key=lambda n: names.index(n) if n in names else len(names)))
                             for g in overlapping(ax, pts))
            title += "\n" + wrapped_title(f"no point: {missing}", _PANEL_IN[0] - 0.4, 7) if missing else ""
            title += "\n" + wrapped_title(f"on one spot: {over}", _PANEL_IN[0] - 0.4, 7) if over else ""
            ax.set_title(title, fontsize=8)
            ax.set_xlabel(f"{PREDICTORS[MAIN_PREDICTOR][0]} at {entry['label']}", fontsize=8)
            ax.set_ylabel(tlabel, fontsize=8)
    if handles:  # one key for every panel, under them: variants that cluster keep their names legible
        order = sorted(handles, key=lambda n: names.index(n) if n in names else len(names))
        fig.legend([handles[n] for n in order], order, loc="outside lower center",
                   ncols=min(len(order), _KEY_PER_PANEL * len(entries)), fontsize=8, frameon=False)
    mark_quick(fig, cfg.quick)
    return fig


def _style(names: List[str], name: str) -> Dict[str, Any]:
    """A variant's marker and colour, the same on every panel; open (an outline), so that variants whose points
    nearly coincide overlay their shapes instead of the later one hiding the earlier (filled, ntk's triangle lay
    whole under yarn's at 12k in docs/study/table1_smollm2: 7 markers for n = 8)."""
    k = names.index(name) if name in names else len(names)
    return {"marker": MARKERS[k % len(MARKERS)], "facecolors": "none", "edgecolors": f"C{k % 10}",
            "linewidths": 1.4}
