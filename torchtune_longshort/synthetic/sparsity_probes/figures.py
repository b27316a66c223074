"""The sparsity probes as one grid of figures (``--figure beyond``): sparse parity, k-sparse planted correlations
and parity with a scratchpad, each trained per seed, scored per test length, written as CSV + PNG +
``beyond_summary.json``.
"""

from __future__ import annotations

import csv
import io
import json
import os
import time
from contextlib import closing
from dataclasses import asdict, replace
from typing import Dict, List, Optional, Sequence

import numpy as np
import torch

from torchtune_longshort.output_guard import figure_bytes, read_json, save_figure, write_together
from torchtune_longshort.plots.axes import count_axis, mark_quick, series_style
from torchtune_longshort.worker_pool import unordered

from ..figures import legend_outside, mark_l_train
from ..train import run_provenance
from .planted_correlations import PlantedConfig, train_planted
from .scratchpad_parity import ScratchpadConfig, train_scratchpad
from .sparse_parity import ParityConfig, train_parity

_TRAINERS = {ParityConfig: train_parity, PlantedConfig: train_planted, ScratchpadConfig: train_scratchpad}


def train_probe(cfg) -> Dict:
    """Train and score one probe run, whichever of the three configs ``cfg`` is."""
    return _TRAINERS[type(cfg)](cfg)


def _worker(item) -> tuple:
    key, cfg = item
    torch.set_num_threads(1)
    return key, train_probe(cfg)


BEYOND_FIGURES = ("parity", "parity_pe", "planted", "scratchpad")
BEYOND_TITLES = {
    "parity": "Sparse parity: accuracy vs length, by K_train",
    "parity_pe": "Sparse parity (K_train=2): position schemes",
    "planted": "k-sparse planted correlations (sum mod q at <SEP>), RoPE",
    "scratchpad": "Parity of l bits: direct answer vs scratchpad, position ids",
}


def _sized(base, quick: bool):
    """``base`` as is, or its test-sized version (``--quick``): l_train 6, 40 steps, width 32, 3 test lengths."""
    return replace(base, l_train=6, max_steps=40, dim=32, test_ls=(3, 6, 12), test_n=64) if quick else base


def beyond_configs(name: str, quick: bool) -> List[tuple]:
    """(label, config) curves of a beyond-the-paper figure (configs are ParityConfig, PlantedConfig or
    ScratchpadConfig; seed 0)."""

    if name in ("parity", "parity_pe"):
        base = _sized(ParityConfig(), quick)
        if name == "parity":
            # sparsity: train on k <= K_train for K_train = 1, 2, 3; test k = 1..4 at every length
            return [(f"K_train={K}", replace(base, k_train=K, test_ks=(1, 2, 3, 4) if not quick else (1, 2, 3)))
                    for K in ((1, 2, 3) if not quick else (1, 2))]
        return [(label, replace(base, pe=pe, positions=p)) for label, pe, p in
                (("NoPE", "nope", "plain"), ("RoPE", "rope", "plain"), ("RoPE + PoSE", "rope", "pose"),
                 ("RoPE + coupling", "rope", "couple"))]
    if name == "planted":
        base = _sized(PlantedConfig(), quick)
        w = 4 if not quick else 3
        curves = [(f"k={k}, spread", replace(base, k=k)) for k in (1, 2, 3)]
        return curves + [(f"k={k}, window {w}", replace(base, k=k, window=w)) for k in (2, 3)]
    if name == "scratchpad":
        base = _sized(ScratchpadConfig(), quick)
        return [(label, replace(base, mode=mode, pe=pe, positions=p)) for label, mode, pe, p in
                (("no scratchpad, RoPE", "direct", "rope", "plain"),
                 ("scratchpad, RoPE", "scratchpad", "rope", "plain"),
                 ("scratchpad, RoPE + PoSE", "scratchpad", "rope", "pose"),
                 ("scratchpad, RoPE + coupling", "scratchpad", "rope", "couple"),
                 ("scratchpad, learned abs. + coupling", "scratchpad", "learned", "couple"))]
    raise ValueError(f"figure={name!r} is unknown; accepted: {', '.join(BEYOND_FIGURES)}")


def _run_key(cfg) -> str:
    return type(cfg).__name__ + json.dumps(asdict(cfg), sort_keys=True)


def run_beyond(names: Sequence[str], out_dir: str, quick: bool, seeds: Sequence[int], workers: int) -> Dict:
    """Train the curves of each figure over seeds; writes ``fig_<name>.csv``, ``fig_<name>.png`` and
    ``beyond_summary.json`` (merged with an earlier one in ``out_dir``, so figures can be run one at a time).
    Returns the summary."""
    t0 = time.time()
    curves = {n: beyond_configs(n, quick) for n in names}
    todo = {_run_key(replace(c, seed=s)): replace(c, seed=s) for cs in curves.values() for _, c in cs for s in seeds}
    results = _train_all(todo, workers)
    os.makedirs(out_dir, exist_ok=True)  # once every run has trained: a run stopped there leaves no empty folder
    path = os.path.join(out_dir, "beyond_summary.json")
    earlier = read_json(path) if os.path.exists(path) else None
    summary: Dict = earlier if isinstance(earlier, dict) else {}
    tables = {n: _figure_table(cs, seeds, results) for n, cs in curves.items()}
    summary.update({n: table for n, (_, table) in tables.items()})
    # one entry per invocation (keyed by its figures): the file merges several runs of the command
    summary.setdefault("meta", {})[",".join(names)] = {
        "quick": quick, "seeds": list(seeds), "workers": workers, "wall_seconds": time.time() - t0,
        "provenance": run_provenance()}
    # every file prepared (the figures drawn) before the first is written, then all written with a stop held
    # (``write_together``). The summary first: it marks the folder's files as this command's (``--out``'s check), so a
    # run stopped part-way (a full disk, a kill) leaves nothing that blocks its rerun; each file whole or not at all
    files = [(path, json.dumps(summary, indent=1).encode())]
    for n, (rows, table) in tables.items():
        files += _figure_files(n, rows, table, out_dir, quick)
    write_together(files)
    return summary


def _train_all(todo: Dict[str, object], workers: int) -> Dict[str, Dict]:
    """{run key: result} for every config of ``todo``, in ``workers`` processes (in-process for one)."""
    from tqdm import tqdm

    if workers <= 1:
        return {k: train_probe(c) for k, c in tqdm(todo.items(), desc="beyond runs")}
    with closing(unordered(_worker, todo.items(), workers)) as results:  # a stop ends them all, as in run_all
        return dict(tqdm(results, total=len(todo), desc="beyond runs"))


def _figure_table(curves: List[tuple], seeds: Sequence[int], results: Dict[str, Dict]) -> tuple:
    """(the CSV rows of a figure: curve, seed, group, test length, accuracy; its summary table {curve label: seed
    means and minima, train losses, times, chance level})."""
    rows, table = [], {}
    for label, c in curves:
        rs = [results[_run_key(replace(c, seed=s))] for s in seeds]
        for s, r in zip(seeds, rs):
            for key, a in r["acc"].items():
                grp, l = key.split(",")
                rows.append([label, s, grp, l, f"{a:.4f}"])
        table[label] = {"l_train": c.l_train, "k_train": getattr(c, "k_train", getattr(c, "k", None)),
                        "acc_mean": {key: float(np.mean([r["acc"][key] for r in rs])) for key in rs[0]["acc"]},
                        "acc_min": {key: float(np.min([r["acc"][key] for r in rs])) for key in rs[0]["acc"]},
                        "final_train_loss": [r["final_train_loss"] for r in rs],
                        "seconds": [r["seconds"] for r in rs], "chance": 1.0 / getattr(c, "q", 2)}
        if "step_acc" in rs[0]:
            table[label]["step_acc_mean"] = {l: np.mean([r["step_acc"][l] for r in rs], 0).tolist()
                                             for l in rs[0]["step_acc"]}
    return rows, table


def _figure_files(name: str, rows: List[list], table: Dict, out_dir: str, quick: bool = False) -> List[tuple]:
    """``fig_<name>.csv`` (one row per curve, seed and test point) and ``fig_<name>.png``, as (path, bytes)."""
    fh = io.StringIO(newline="")
    w = csv.writer(fh)
    w.writerow(["figure", "curve", "seed", "group", "l_test", "accuracy"])
    w.writerows([name, *row] for row in rows)
    return [(os.path.join(out_dir, f"fig_{name}.csv"), fh.getvalue().encode("utf-8")),
            (os.path.join(out_dir, f"fig_{name}.png"), figure_bytes(probe_figure(name, table, quick)))]


def replot_beyond(names: Sequence[str], out_dir: str) -> List[str]:
    """Redraw ``fig_<name>.png`` from the tables of ``beyond_summary.json`` in ``out_dir``, training nothing
    (``--figure beyond --replot``); a figure last made by a quick invocation keeps its quick mark. Returns the PNG
    paths written."""
    path = os.path.join(out_dir, "beyond_summary.json")
    if not os.path.exists(path):
        raise ValueError(f"{path} does not exist: run the beyond figures first")
    with open(path) as fh:
        summary = json.load(fh)
    written = []
    for n in names:
        if n not in summary:
            raise ValueError(f"figure={n!r} is not in {path} (run it first)")
        runs = [m for key, m in (summary.get("meta") or {}).items() if n in key.split(",")]
        png = os.path.join(out_dir, f"fig_{n}.png")
        save_figure(probe_figure(n, summary[n], quick=bool(runs and runs[-1].get("quick"))), png)
        written.append(png)
    return written


def probe_figure(name: str, table: Dict, quick: bool = False):
    """The matplotlib Figure of one beyond figure from its summary table (as ``_figure_table`` returns it; no pyplot
    state): one line per curve and group, x = test length, y = seed-mean accuracy; the training length (a labelled
    top-axis tick) and the chance level are named in each panel's legend, which sits under the panel and covers no
    line. ``quick``: the figure says it is a quick (smoke) run."""
    build = _parity_figure if name in ("parity", "parity_pe") else _planted_or_scratchpad_figure
    fig = build(name, table)
    mark_quick(fig, quick)
    return fig


def _line_style(i: int, n: int, n_points: int) -> dict:
    """Line ``i`` of ``n``: plots.axes.series_style (its own colour, line style and marker, later lines thinner with
    open markers), at the probe figures' smaller size: a line drawn over an equal one (scratchpad's RoPE and RoPE +
    PoSE, both 0 past l_train) leaves it showing."""
    style = series_style(i, n, n_points)
    return {**style, "ms": style["ms"] * 0.7, "lw": style["lw"] * 0.7}


def _style(ax, title: str, xlabel: str, y_low: float, l_train: int, chance: Optional[float]) -> None:
    # the test lengths' axis labels the first and the last one (matplotlib's own ticks left the first, 5, unlabelled)
    lengths = [int(x) for line in ax.lines for x in line.get_xdata()]
    if lengths:
        count_axis(ax, min(lengths), max(lengths))
    mark_l_train(ax, [l_train])
    if chance is not None:
        ax.axhline(chance, color="k", lw=0.5, ls="--")
    ax.set_title(title, fontsize=8)
    ax.set_xlabel(xlabel, fontsize=8)
    ax.set_ylim(y_low, 1.02)
    ax.grid(alpha=0.3, lw=0.5)
    legend_outside(ax, chance=chance, loc="below")


def _panels(n: int, width: float, height: float):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width * n, height), dpi=90, layout="constrained")
    return fig, fig.subplots(1, n, sharey=True, squeeze=False)


def _finish(fig, axes, name: str):
    axes[0][0].set_ylabel("accuracy")
    fig.suptitle(BEYOND_TITLES[name], fontsize=9)
    return fig


def _planted_or_scratchpad_figure(name: str, table: Dict):
    """Planted: a panel per placement (spread / window), a line per k. Scratchpad: a panel per metric (final answer,
    whole scratchpad), a line per curve."""
    panels: Dict[str, List] = {}
    for label, d in table.items():
        if name == "planted":
            k, placement = label.split(", ")
            panels.setdefault(placement, []).append((k, d["acc_mean"], d["l_train"]))
        else:
            for metric, title in (("answer", "final answer"), ("exact", "whole scratchpad")):
                pts = {key: v for key, v in d["acc_mean"].items() if key.startswith(metric + ",")}
                if pts:
                    panels.setdefault(title, []).append((label, pts, d["l_train"]))
    # one style per line across panels (colour, line style, marker), so lines that coincide all stay visible
    names = list(dict.fromkeys(line for lines in panels.values() for line, _, _ in lines))
    chance = next(iter(table.values())).get("chance", 0.5)
    fig, axes = _panels(len(panels), 3.4, 4.4)
    for ax, (title, lines) in zip(axes[0], panels.items()):
        for line, acc, l_train in lines:
            pts = sorted((int(key.split(",")[1]), v) for key, v in acc.items())
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=line,
                    **_line_style(names.index(line), len(names), len(pts)))
        _style(ax, title, "test length l", -0.02, lines[0][2], chance if title != "whole scratchpad" else None)
    return _finish(fig, axes, name)


def _parity_figure(name: str, table: Dict):
    """A panel per curve (K_train or position scheme), a line per test sparsity k."""
    labels = list(table)
    fig, axes = _panels(len(labels), 2.6, 3.9)
    for ax, label in zip(axes[0], labels):
        d = table[label]
        ks = sorted({int(k.split(",")[0]) for k in d["acc_mean"]})
        for i, k in enumerate(ks):
            pts = sorted((int(key.split(",")[1]), v) for key, v in d["acc_mean"].items() if int(key.split(",")[0]) == k)
            line = f"k={k}" + (" (> K_train)" if k > d["k_train"] else "")
            ax.plot([p[0] for p in pts], [p[1] for p in pts], label=line, **_line_style(i, len(ks), len(pts)))
        _style(ax, label, "test pairs l", 0.4, d["l_train"], 0.5)
    return _finish(fig, axes, name)
