"""The paper's synthetic figures (Du et al., ICML 2025: Fig. 1a/1b/1c, 4, 5, 6) plus the App. C.1 theory check.

``figure_curves`` declares each figure as a list of (label, RunConfig) curves; ``run_figures`` trains every distinct run
once (several seeds, in ``workers`` processes), writes ``runs.json`` / ``<figure>.csv`` / ``<figure>.png`` and
``summary.json`` (the claims of ``claims``, with their numbers) into an output folder; ``replot_figures`` redraws
the PNGs from those CSVs without training (the drawing itself: :mod:`torchtune_longshort.synthetic.figures`).
"""

from __future__ import annotations

import csv
import io
import os
import time
from contextlib import closing
from dataclasses import asdict, replace
from typing import Dict, List, Optional, Sequence, Tuple

import numpy as np
import torch

from torchtune_longshort._quiet import quiet_upstream
from torchtune_longshort.config.values import check_creatable
from torchtune_longshort.output_guard import figure_bytes, read_json, save_figure, strict_json, write_together
from torchtune_longshort.refusals import one_line
from torchtune_longshort.worker_pool import unordered

from .claims import figure_records, keep_earlier_figures, summarize_claims
from .figures import synthetic_figure
from .lr_search import choose_runs, diverged_record
from .misalignment import scalar_misalignment
from .models import PE_LABELS, POSITIONAL_ENCODINGS
from .outrep import OUTREP_LABELS, OUTREPS
from .run_cache import cache_path, cached, code_key, say_reused, say_stale, store
from .run_cache import key as _key
from .train import Diverged, RunConfig, run_provenance, train_run

PAPER_FIGURES = ("1a", "1b", "1c", "4", "5", "6", "theory")
FIG4_L_TRAINS = (10, 20, 30)  # the paper's Fig. 4 curves


def figure_curves(name: str, base: RunConfig, l_trains: Sequence[int] = FIG4_L_TRAINS) -> List[Tuple[str, RunConfig]]:
    """(label, config-without-seed) for every curve of a figure, derived from ``base`` (sizes, steps, lengths)."""
    b = replace(base, task="length", pe="nope", outrep="identity", bits="iid", model="transformer")
    if name == "1a":
        return [(PE_LABELS[pe], replace(b, task="mean", pe=pe)) for pe in POSITIONAL_ENCODINGS]
    if name == "1b":
        return [(PE_LABELS[pe], replace(b, pe=pe)) for pe in POSITIONAL_ENCODINGS]
    if name == "1c":
        return [(f"f = {OUTREP_LABELS[f]}", replace(b, outrep=f)) for f in OUTREPS]
    if name == "4":
        return [(f"l_train = {lt}", replace(b, l_train=lt)) for lt in l_trains if lt <= b.l_test]
    if name == "5":
        return [(f"f = {OUTREP_LABELS[f]}", replace(b, task="sum", outrep=f)) for f in ("identity", "sqrt")]
    if name == "6":
        return [(t, replace(b, task=t, bits="uniform_ones")) for t in ("mean", "length", "sum")]
    if name == "theory":
        # the theory model has ~100 parameters: the transformer's lr grid is far too small for it to reach the
        # least-squares optimum within the budget, so it gets a larger lr and more (cheap) steps
        lin = replace(b, model="linear", lr=1e-2, max_steps=max(6 * b.max_steps, 150), eval_every=max(b.eval_every, 50))
        return [(t, replace(lin, task=t)) for t in ("mean", "length", "sum")]
    raise ValueError(f"figure={name!r} is unknown; accepted: {', '.join(PAPER_FIGURES)}")


def check_figure_runs(names: Sequence[str], base: RunConfig, l_trains: Sequence[int] = FIG4_L_TRAINS) -> None:
    """Every run the figures ``names`` would train, checked before anything trains or is written: a size its model
    refuses (``RunConfig.validate``), or a curve with no test length beyond its l_train (every claim measures the
    error there), raises ``ValueError`` naming the figure, the curve and the field."""
    for n in names:
        if n not in PAPER_FIGURES:
            raise ValueError(f"figure={n!r} is unknown; accepted: {', '.join(PAPER_FIGURES)} or 'all'")
        for label, c in figure_curves(n, base, l_trains):
            try:
                c.validate()
                if c.l_test <= c.l_train:
                    raise ValueError(f"l_test={c.l_test} must be > l_train={c.l_train}: the figures measure the "
                                     "error beyond the training length")
            except ValueError as e:
                raise ValueError(f"figure {n} ({label}): {e}") from None


def _worker(cfg: RunConfig) -> Dict:
    # one thread per process: tiny models scale far better over processes than over intra-op threads
    torch.set_num_threads(1)
    t0 = time.time()
    try:
        res = train_run(cfg)
    except Diverged as e:  # recorded, not raised: the other rates of an lr search go on (``lr_search``)
        return diverged_record(cfg, e, time.time() - t0)
    model = res.pop("model")
    res["misalignment"] = {
        str(L): scalar_misalignment(model, cfg.task, L, cfg.outrep, n_seq=32, bits=cfg.bits, seed=cfg.seed)
        for L in sorted({cfg.l_train, cfg.l_test})
        if L >= 2
    }
    return res


def run_all(configs: List[RunConfig], workers: int, cache_dir: Optional[str] = None) -> Dict[str, Dict]:
    """Train each distinct config once; returns {config key: result}. Shows a tqdm bar over runs.

    With ``cache_dir``, each finished run is saved there as JSON (whole or not at all, with the code key of the code
    that trained it: :mod:`.run_cache`) and reused by a later call with the same config and the same code (an
    interrupted reproduction resumes instead of starting over); an entry that cannot be read, or that other code
    wrote, is trained again.
    """
    from tqdm import tqdm

    code = code_key()
    out, todo, stale = {}, [], []
    for c in {_key(c): c for c in configs}.values():
        p = cache_path(cache_dir, c)
        res = cached(p, code, stale) if p is not None else None
        if res is not None:
            out[_key(c)] = res
        else:
            todo.append(c)
    if cache_dir is not None:
        if todo:  # runs to store: a folder that takes no new file is refused before the first trains (a cache that
            # holds every run is only read: a read-only one, chattr +i or a read-only mount, serves a rerun)
            check_creatable("--cache", cache_dir, writable=True)
        say_stale(stale, cache_dir, code)
        say_reused(len(out), len(out) + len(todo), cache_dir)
        os.makedirs(cache_dir, exist_ok=True)

    def _store(res: Dict) -> None:
        c = RunConfig(**res["config"])
        out[_key(c)] = res = {**res, "code_key": code}
        store(cache_dir, c, res)
    # longest first keeps both workers busy to the end
    todo.sort(key=lambda c: -(c.l_train * (1 if c.model == "transformer" else 0.05)))
    if not todo:  # every run from --cache (said above): no bar ('runs: 0it', printed twice to a file or pipe)
        return out
    if workers <= 1 or len(todo) <= 1:
        for c in tqdm(todo, desc="runs"):
            _store(_worker(c))
        return out
    # no more processes than runs ('--workers 99' started 99, each importing torch, for 12 runs); a stop ends them all
    # (a Pool's could hang on SIGTERM: worker_pool)
    with closing(unordered(_worker, todo, workers, initializer=quiet_upstream)) as results:  # imports kept quiet
        for res in tqdm(results, total=len(todo), desc="runs"):
            _store(res)
    return out


def _plot(name: str, data: Dict, path: str, quick: bool = False) -> None:
    save_figure(synthetic_figure(name, data, quick), path)


def read_figure_csv(path: str) -> Dict[str, Dict[int, Dict[int, float]]]:
    """``fig<name>.csv`` as {curve label: {seed: {length: test MSE}}} (curves in file order)."""
    out: Dict[str, Dict[int, Dict[int, float]]] = {}
    with open(path, newline="") as fh:
        for row in csv.DictReader(fh):
            seed = out.setdefault(row["curve"], {}).setdefault(int(row["seed"]), {})
            seed[int(row["length"])] = float(row["test_mse"])
    return out


def replot_figures(names: Sequence[str], out_dir: str) -> List[str]:
    """Redraw ``fig<name>.png`` from the ``fig<name>.csv`` and ``summary.json`` a :func:`run_figures` call wrote to
    ``out_dir``, training nothing (``python -m torchtune_longshort.synthetic --figure all --replot --out DIR``).
    Each figure is drawn with its own run's record in summary.json (each curve's l_train, whether it was quick): a
    figure the summary holds no record of is refused, as is a CSV that is missing or cannot be read, before any PNG
    is written. Returns the PNG paths written."""
    summary_path = os.path.join(out_dir, "summary.json")
    records = figure_records(read_json(summary_path) or {})
    if not records:
        raise ValueError(f"{summary_path} is missing or has no meta.base_config: replot needs the summary.json of "
                         "the run_figures call that wrote the CSVs")
    drawn = []
    for n in names:
        if n not in PAPER_FIGURES:
            raise ValueError(f"figure={n!r} is unknown; accepted: {', '.join(PAPER_FIGURES)} or 'all'")
        path = os.path.join(out_dir, f"fig{n}.csv")
        if not os.path.exists(path):
            raise ValueError(f"figure={n!r}: {path} does not exist (run the figure first)")
        if n not in records:
            raise ValueError(f"figure={n!r}: {summary_path} does not record the run that wrote {path} (its l_train, "
                             f"whether it was quick); rerun --figure {n} without --replot to redraw it")
        drawn.append((n, _replot_data(n, path, records[n]), bool(records[n].get("quick"))))
    written = []
    for n, data, quick in drawn:
        png = os.path.join(out_dir, f"fig{n}.png")
        _plot(n, data, png, quick=quick)
        written.append(png)
    return written


def _replot_data(name: str, path: str, record: Dict) -> Dict:
    """A figure's curves from its CSV (``path``), each with its l_train from the figure's ``record``."""
    try:
        by_curve = read_figure_csv(path)
    except (KeyError, ValueError) as e:
        raise ValueError(f"{path} is not a figure's CSV (figure, curve, seed, length, test_mse): "
                         f"{one_line(e)}") from None
    if not by_curve:
        raise ValueError(f"{path} holds no rows: rerun --figure {name} without --replot")
    base = RunConfig(**record["base_config"])
    l_trains = [int(lab.split("=")[1]) for lab in by_curve if lab.startswith("l_train =")] or FIG4_L_TRAINS
    l_train_of = record.get("l_train") or {label: c.l_train for label, c in figure_curves(name, base, l_trains)}
    data = {}
    for label, seeds in by_curve.items():
        lengths = sorted(next(iter(seeds.values())))
        ragged = [s for s, per in seeds.items() if sorted(per) != lengths]
        if ragged:
            raise ValueError(f"{path}: curve {label!r} seed {ragged[0]} has other lengths than seed "
                             f"{next(iter(seeds))}: rerun --figure {name} without --replot")
        data[label] = {"lengths": lengths, "l_train": l_train_of.get(label, base.l_train),
                       "mse": [np.array([per[length] for length in lengths]) for per in seeds.values()]}
    return data


def _seed_curves(results: Dict[str, Dict], cfg: RunConfig, seeds: Sequence[int]) -> List[np.ndarray]:
    return [np.array(results[_key(replace(cfg, seed=s))]["test_mse"]) for s in seeds]


def searched_rates(c: RunConfig, lrs: Optional[Sequence[float]]) -> Optional[List[float]]:
    """The learning rates curve ``c`` is trained at under the grid ``lrs`` (None: it keeps its own lr, as the App.
    C.1 linear model does)."""
    return list(lrs) if lrs and c.model == "transformer" else None


def figure_run_configs(curves: Dict[str, List[Tuple[str, RunConfig]]], seeds: Sequence[int],
                       lrs: Optional[Sequence[float]]) -> List[RunConfig]:
    """Every run the figures' ``curves`` (:func:`figure_curves` by figure) train: each curve, seed and searched rate
    (a run two figures share listed twice: ``run_all`` trains it once)."""
    return [replace(c, seed=s, lr=lr) for cs in curves.values() for _, c in cs for s in seeds
            for lr in searched_rates(c, lrs) or [c.lr]]


def run_figures(
    names: Sequence[str],
    out_dir: str,
    base: RunConfig,
    seeds: Sequence[int] = (0, 1, 2),
    workers: int = 2,
    l_trains: Sequence[int] = FIG4_L_TRAINS,
    cache_dir: Optional[str] = None,
    lrs: Optional[Sequence[float]] = None,
    quick: bool = False,
) -> Dict:
    """Train, evaluate, plot and summarize the requested figures. Returns the summary dict (also in summary.json).

    ``cache_dir``: per-run JSON cache (see ``run_all``); None trains everything afresh.
    ``lrs``: learning-rate grid (the paper's is ``train.PAPER_LRS``). Every transformer curve and seed is trained once
    per lr and the run with the lowest validation MSE (training lengths only: test lengths never pick the lr) is
    kept; the choices go to ``summary.json`` under ``meta.lr_choice``. The App. C.1 linear model keeps its own lr.
    A rate whose run diverges is recorded as such and skipped; ``train.Diverged`` is raised, before anything is
    written, only where every rate of a curve and seed diverged (without ``lrs``: where a run diverged).
    ``quick``: the run is the test-sized one (``--quick``); its figures say so, and so do ``meta.quick`` and each
    decided claim's entry (``"quick": true``).
    """
    base.validate()
    check_figure_runs(names, base, l_trains)  # before anything trains or is written
    t0 = time.time()
    curves = {n: figure_curves(n, base, l_trains) for n in names}
    if lrs is not None and (not lrs or any(not lr > 0 for lr in lrs)):
        raise ValueError(f"lrs={list(lrs)} must be a non-empty list of positive learning rates")

    def grid(c: RunConfig) -> Optional[List[float]]:  # the rates searched (None: the curve keeps its own lr)
        return searched_rates(c, lrs)

    configs = figure_run_configs(curves, seeds, lrs)
    trained = run_all(configs, workers, cache_dir)  # every run, each once: runs.json and meta.runs list them all
    # + each searched curve's kept run under its config without the search (base lr); a diverged rate is skipped
    results, lr_choice = choose_runs(curves, seeds, grid, trained)
    figs: Dict[str, Dict] = {n: {label: {"lengths": list(range(1, c.l_test + 1)), "l_train": c.l_train,
                                         "mse": _seed_curves(results, c, seeds)} for label, c in cs}
                             for n, cs in curves.items()}
    summary = summarize_claims(figs, base, quick)
    misal = {}
    for n, cs in curves.items():
        for label, c in cs:
            rs = [results[_key(replace(c, seed=s))]["misalignment"] for s in seeds]
            misal[f"{n}: {label}"] = {L: {k: float(np.mean([r[L][k] for r in rs])) for k in rs[0][L]} for L in rs[0]}
    summary["scalar_misalignment"] = misal
    summary["meta"] = {"base_config": asdict(base), "quick": quick, "seeds": list(seeds), "workers": workers,
                       "wall_seconds": time.time() - t0, "torch_threads_main": torch.get_num_threads(),
                       "lrs": list(lrs) if lrs else None, "lr_choice": lr_choice, "code_key": code_key(),
                       "provenance": run_provenance()}
    summary["meta"]["figures"] = {n: {"base_config": asdict(base), "quick": quick, "seeds": list(seeds),
                                      "l_train": {label: c.l_train for label, c in cs}} for n, cs in curves.items()}
    summary["meta"]["kept_figures"] = keep_earlier_figures(summary, read_json(os.path.join(out_dir, "summary.json"))
                                                           or {}, names)
    runs = list(trained.values())  # not results': there a chosen run hides the base-lr run it is filed under
    fields = ("task", "bits", "pe", "outrep", "model", "l_train", "lr", "seed")
    summary["meta"]["runs"] = [{"config": {k: r["config"][k] for k in fields}, "steps": r["steps"],
                                "seconds": round(r["seconds"], 2), "best_val_mse": r["best_val_mse"],
                                **({"diverged": r["diverged"]} if "diverged" in r else {})} for r in runs]
    # every file prepared (the figures drawn: seconds) before the first is written, then all written with a stop
    # held (milliseconds): a Ctrl-C while they were drawn left this run's summary.json beside an earlier run's CSVs.
    # summary.json first: it is what marks the folder's files as this command's (``--out``'s check), so a run that
    # stops part-way (a full disk, a kill) leaves nothing that blocks its rerun; each file is written whole or not
    files = [(os.path.join(out_dir, "summary.json"), strict_json(summary, indent=1, default=float).encode()),
             (os.path.join(out_dir, "runs.json"), strict_json(runs).encode())]  # an overflowed MSE as null
    for n in curves:
        files += [(os.path.join(out_dir, f"fig{n}.csv"), _csv_bytes(n, figs[n], seeds)),
                  (os.path.join(out_dir, f"fig{n}.png"), figure_bytes(synthetic_figure(n, figs[n], quick)))]
    os.makedirs(out_dir, exist_ok=True)  # once every run has trained: a run that fails leaves no empty folder
    write_together(files)
    return summary


def _csv_bytes(name: str, fig: Dict, seeds: Sequence[int]) -> bytes:
    """``fig<name>.csv``: one row per curve, seed and length."""
    fh = io.StringIO(newline="")
    w = csv.writer(fh)
    w.writerow(["figure", "curve", "seed", "length", "test_mse"])
    for label, d in fig.items():
        for s, m in zip(seeds, d["mse"]):
            w.writerows([name, label, s, l, f"{v:.6g}"] for l, v in zip(d["lengths"], m))
    return fh.getvalue().encode("utf-8")
