"""Command line: ``python -m torchtune_longshort.synthetic ...``

Reproduce the paper's figures:   python -m torchtune_longshort.synthetic --figure all --out docs/synthetic
Test-sized version (< 1 min):    python -m torchtune_longshort.synthetic --figure all --quick --out /tmp/syn
One run of your own:             python -m torchtune_longshort.synthetic --task length --pe rope --outrep inv_sqrt
Beyond the paper (sparsity):     python -m torchtune_longshort.synthetic --figure beyond --out docs/synthetic
The paper's lr search:           python -m torchtune_longshort.synthetic --figure 1b,1c --lrs 5e-5,1e-4,5e-4
Redraw the PNGs from the CSVs:   python -m torchtune_longshort.synthetic --figure all --replot --out docs/synthetic
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from dataclasses import replace
from pathlib import Path
from typing import List, Optional

from torchtune_longshort.plural import counted
from torchtune_longshort.refusals import (
    REFUSED, ArgumentParser, fault_line, one_line, quiet_when_the_reader_leaves, refusal, show_traceback, stoppable,
    stopped_while_importing, user_path,
)

from . import PROG

with stopped_while_importing(__name__, PROG):  # Ctrl-C while torch and matplotlib are imported: one line, exit 130
    from torchtune_longshort._quiet import quiet_upstream
    from torchtune_longshort.config.values import UnwritablePath, check_creatable
    from torchtune_longshort.devices import check_fits
    from torchtune_longshort.disk_space import is_out_of_space, out_of_space_line
    from torchtune_longshort.made_folders import missing_root, remove_made_folders
    from torchtune_longshort.output_guard import atomic_write_text, check_output_folder, read_json, strict_json
    from torchtune_longshort.plots.available import matplotlib_problem
    from torchtune_longshort.worker_pool import WorkerDied

    from .claims import claim_lines, figure_records
    from .cli_flags import (
        check_beyond_flags, check_figure_flags, check_linear_model_flags, check_replot_flags, check_single_run_flags,
        flag_names, interrupted,
    )
    from .experiments import FIG4_L_TRAINS, PAPER_FIGURES, check_figure_runs, replot_figures, run_figures
    from .lr_search import lr_table
    from .misalignment import scalar_misalignment
    from .models import POSITIONAL_ENCODINGS
    from .out_room import check_figures_room, check_single_room
    from .outrep import OUTREPS
    from .sparsity_probes.figures import BEYOND_FIGURES, replot_beyond, run_beyond
    from .tasks import BIT_DISTRIBUTIONS, TASKS
    from .train import (MODELS, OPTIMIZERS, PAPER_LRS, Diverged, RunConfig, run_provenance, test_batch_bytes,
                        train_run)


# --quick: the test-sized run (a flag given on the command line still wins)
_QUICK = {"l_train": 6, "l_test": 16, "max_steps": 30, "eval_every": 10, "test_per_length": 20, "val_size": 256}
_QUICK_FIG4_L_TRAINS = (6, 10)


def _comma(values) -> str:
    return ",".join(f"{v:g}" for v in values)


def _parser() -> argparse.ArgumentParser:
    run = RunConfig()  # the flags' defaults are a run's defaults
    p = ArgumentParser(prog=PROG, description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--figure", default=None,
                   help=f"comma list of {', '.join(PAPER_FIGURES + BEYOND_FIGURES)}; 'all' = the paper's figures, "
                        f"'beyond' = the sparsity probes. Without --figure: one run from the flags below. With it, "
                        "each figure "
                        "sets its curves' --task/--bits/--pe/--outrep/--model (refused there) and --seeds the seeds; "
                        "the sizes, lengths, --steps, --lr, --optimizer and --batch-size apply to every curve of the "
                        "paper's figures (the beyond figures fix their own runs).")
    p.add_argument("--out", default="synthetic_out", type=user_path,
                   help="output folder (JSON, CSV, PNG; default: synthetic_out)")
    p.add_argument("--cache", default=None, type=user_path,
                   help="folder of per-run JSON results to reuse/resume (default: none, everything is retrained); "
                        "an entry that other code wrote (the synthetic package's source changed since) is trained "
                        "again")
    p.add_argument("--quick", action="store_true",
                   help="test-sized version: short lengths, few steps, 2 seeds; its figures say 'quick (smoke) run'")
    p.add_argument("--replot", action="store_true",
                   help="with --figure: redraw the PNGs from the CSV / summary JSON already in --out, training nothing")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3, quick 2)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel runs in processes (default: min(2, CPUs); quick: 1, in-process, no start-up cost)")
    paper_lrs = _comma(PAPER_LRS)
    p.add_argument("--task", default=run.task, help=f"one of {', '.join(TASKS)} (default {run.task})")
    p.add_argument("--bits", default=run.bits, help=f"one of {', '.join(BIT_DISTRIBUTIONS)} (default {run.bits})")
    p.add_argument("--pe", default=run.pe, help=f"one of {', '.join(POSITIONAL_ENCODINGS)} (default {run.pe})")
    p.add_argument("--outrep", default=run.outrep, help=f"one of {', '.join(OUTREPS)} (default {run.outrep})")
    p.add_argument("--model", default=run.model, help=f"one of {', '.join(MODELS)} (default {run.model})")
    p.add_argument("--l-train", type=int, default=None,
                   help=f"train lengths U[1, l_train] (default {run.l_train}, quick {_QUICK['l_train']})")
    p.add_argument("--l-test", type=int, default=None,
                   help=f"test lengths 1..l_test (default {run.l_test}, quick {_QUICK['l_test']})")
    p.add_argument("--l-trains", default=None,
                   help=f"l_train values of figure 4's curves, with a --figure that draws figure 4 only (default "
                        f"{_comma(FIG4_L_TRAINS)}; quick {_comma(_QUICK_FIG4_L_TRAINS)})")
    p.add_argument("--dim", type=int, default=run.dim, help=f"model width (default {run.dim})")
    p.add_argument("--layers", type=int, default=run.num_layers, help=f"layers (default {run.num_layers})")
    p.add_argument("--heads", type=int, default=run.num_heads, help=f"attention heads (default {run.num_heads})")
    p.add_argument("--steps", type=int, default=None,
                   help=f"max training steps (default {run.max_steps}, quick {_QUICK['max_steps']})")
    p.add_argument("--lr", type=float, default=run.lr,
                   help=f"learning rate (default {run.lr:g}; paper grid: {paper_lrs})")
    p.add_argument("--lrs", default=None,
                   help=f"with --figure: comma list of learning rates to search per curve and seed (e.g. the paper's "
                        f"{paper_lrs}); the run with the lowest training-length validation MSE is kept (a rate that "
                        "diverges is recorded as diverged and skipped; the command fails only if every rate of a curve "
                        "diverges). "
                        "Multiplies the time by the grid size.")
    p.add_argument("--optimizer", default=run.optimizer,
                   help=f"one of {', '.join(OPTIMIZERS)} (default {run.optimizer})")
    p.add_argument("--batch-size", type=int, default=run.batch_size,
                   help=f"training batch size (default {run.batch_size})")
    p.add_argument("--seed", type=int, default=run.seed, help=f"seed of a single run (default {run.seed})")
    return p


@quiet_when_the_reader_leaves
def main(argv=None) -> int:
    """The synthetic CLI; Ctrl-C / SIGTERM end it in one line (exit 130 / 143), not a traceback."""
    quiet_upstream()  # before a RoPE model imports torchtune (and so torchao, which logs its line on import)
    a = _parser().parse_args(argv)
    return stoppable(PROG, lambda: _main(a, argv), interrupted(a))


def _main(a: argparse.Namespace, argv=None) -> int:
    # every bad flag value raises ValueError naming the flag, before anything trains
    try:
        given = sys.argv[1:] if argv is None else argv
        if a.figure is not None:
            check_single_run_flags(given, _OPTIONS)
        elif not a.replot:
            check_figure_flags(a)
        if a.replot:
            check_replot_flags(given)
        if a.figure is None and a.model == "linear":
            check_linear_model_flags(given)
        base, workers = _base_config(a)
        if a.figure is not None:
            names = _figure_names(a.figure)
            paper = [n for n in names if n in PAPER_FIGURES]
            beyond = [n for n in names if n in BEYOND_FIGURES]
            n_seeds, l_trains, lrs = _figure_options(a, base.l_test, beyond_only=bool(beyond) and not paper,
                                                     fig4="4" in paper)
            if beyond and not paper:
                check_beyond_flags(sys.argv[1:] if argv is None else argv)
            if not a.replot:
                _check_figure_runs(paper, base, l_trains)
                _check_figure_outputs(a.out, paper, beyond)
        elif not a.replot:
            _check_run_json(a.out)
        if not a.replot:
            check_creatable("--out", a.out, writable=True)  # a folder that cannot be made ended in a traceback
        if a.cache is not None and not a.replot:
            # a file there ended in a traceback, after --out was made; an existing folder that takes no new file is
            # refused once a run is to be stored there, before it trains (experiments.run_all: one that holds every
            # run is only read)
            check_creatable("--cache", a.cache)
        # the disk's room for the files it writes, before anything trains (a full disk was found after training)
        if a.figure is not None and not a.replot:
            check_figures_room(a.out, a.cache, paper, beyond, base, range(n_seeds), l_trains, lrs)
        elif not a.replot:
            check_single_room(a.out, base)
        if a.replot and not Path(a.out).is_dir():
            raise FileNotFoundError(f"--out {a.out!r} does not exist: --replot redraws the figures a run wrote "
                                    "there; name that folder")
        # every figure is drawn: asked before anything trains or is read, and after every other check (importing
        # matplotlib writes its font cache and config folder under HOME: a refused --out left them)
        no_plots = matplotlib_problem() if a.figure is not None else None
        if no_plots:
            raise ValueError(f"--figure: {no_plots} and rerun (the figures cannot be drawn without it)")
    except REFUSED as e:
        return refusal(PROG, flag_names(one_line(e)))
    if a.figure is None:
        if a.replot:
            return refusal(PROG, "--replot needs --figure (the figures to redraw)")
        return _writing(lambda: _single_run(base, a.out), a)
    if a.replot:
        return _replot(paper, beyond, a.out)
    return _writing(lambda: _figures(a, paper, beyond, base, n_seeds, workers, l_trains, lrs), a)


def _writing(job, a: argparse.Namespace) -> int:
    """:func:`_ended`; --out and --cache, where the run made them and a refused run leaves them empty, removed."""
    made = [(f, missing_root(f)) for f in (a.out, a.cache) if f is not None]
    rc = _ended(job, interrupted(a))
    for folder, root in made if rc else ():
        remove_made_folders(folder, root)
    return rc


def _ended(job, kept: str) -> int:
    """``job()``; a run that diverged (``train.Diverged``: the lr and the step) or a worker process killed from
    outside (``worker_pool.WorkerDied``) ends in one line, exit 2; a write that found its disk full (a cache entry,
    a CSV, a figure) ends in one line, exit 2: every file is written whole or not at all, and the folder's summary is
    written first, so the same command reruns. ``kept``: what the command leaves (:func:`interrupted`)."""
    try:
        return job()
    except Diverged as e:  # a learning rate too large, found at the step it diverged
        if show_traceback():
            raise
        return refusal(PROG, one_line(e))
    except UnwritablePath as e:  # a --cache that takes no new file, with runs to store (before they train)
        return refusal(PROG, one_line(e))
    except WorkerDied as e:  # killed from outside (a Pool waited for its result for ever)
        if show_traceback():
            raise
        return refusal(PROG, f"{one_line(e)}; {kept}")
    except Exception as e:
        if show_traceback() or not is_out_of_space(e):
            raise
        return refusal(PROG, out_of_space_line(e))


def _figures(a: argparse.Namespace, paper: List[str], beyond: List[str], base: RunConfig, n_seeds: int,
             workers: int, l_trains: List[int], lrs: Optional[List[float]]) -> int:
    """Train, write and draw the figures asked (``--figure``)."""
    if paper:
        s = run_figures(paper, a.out, base, seeds=range(n_seeds), workers=workers, l_trains=l_trains,
                        cache_dir=a.cache, lrs=lrs, quick=a.quick)
        for line in lr_table(s["meta"]["lr_choice"]) + claim_lines(s, paper):  # the lr search; what each claim checked
            print(line)
        print(f"paper figures {','.join(paper)}: {s['meta']['wall_seconds']:.0f}s -> {a.out}")
    if beyond:
        s = run_beyond(beyond, a.out, quick=a.quick, seeds=range(n_seeds), workers=workers)
        print(f"beyond figures {','.join(beyond)}: {s['meta'][','.join(beyond)]['wall_seconds']:.0f}s -> {a.out}")
    return 0


def _replot(paper: List[str], beyond: List[str], out: str) -> int:
    """--replot: redraw the figures' PNGs in ``out`` from the files their run wrote there."""
    try:
        written = (replot_figures(paper, out) if paper else []) + (replot_beyond(beyond, out) if beyond else [])
    except (OSError, ValueError) as e:
        return refusal(PROG, fault_line(e) or one_line(e))
    print(f"redrew {counted(len(written), 'figure')}: {', '.join(written)}")
    return 0


def _base_config(a: argparse.Namespace) -> tuple:
    """(the validated RunConfig of the flags, with --quick's sizes where a flag is not given; worker count)."""
    workers = a.workers if a.workers is not None else (1 if a.quick else min(2, os.cpu_count() or 1))
    if workers < 1:
        raise ValueError(f"workers={workers} must be >= 1")
    flags = {"l_train": a.l_train, "l_test": a.l_test, "max_steps": a.steps}
    base = RunConfig(task=a.task, bits=a.bits, pe=a.pe, outrep=a.outrep, model=a.model, dim=a.dim,
                     num_layers=a.layers, num_heads=a.heads, lr=a.lr, optimizer=a.optimizer, batch_size=a.batch_size,
                     seed=a.seed)
    base = replace(base, **{**(_QUICK if a.quick else {}), **{k: v for k, v in flags.items() if v is not None}})
    try:
        base.validate()
    except ValueError as e:
        raise ValueError(flag_names(str(e))) from None
    at_once = workers if a.figure is not None else 1  # a figure's runs: one test set per worker process at a time
    check_fits(at_once * test_batch_bytes(base), "cpu",
               f"--l-test={base.l_test}'s test set ({base.test_per_length} sequences of every length 1..{base.l_test}"
               + (f", in each of {at_once} workers)" if at_once > 1 else ")"),
               "use a smaller --l-test (the paper's is 50)" + (", or fewer --workers" if at_once > 1 else ""))
    return base, workers


# every option string of the parser (an exact one is never another option's abbreviation: --out is not --outrep)
_OPTIONS = {o for action in _parser()._actions for o in action.option_strings}


def _check_figure_runs(paper: List[str], base: RunConfig, l_trains: List[int]) -> None:
    """Every run of every paper figure asked, checked before the first one trains (a size only ALiBi refuses
    ended the command in a traceback after the other curves had trained)."""
    try:
        check_figure_runs(paper, base, l_trains)
    except ValueError as e:
        raise ValueError(flag_names(str(e))) from None


def _check_run_json(out: str) -> None:
    """A single run writes ``<out>/run.json``: replaced only when it is an earlier single run's result (its
    ``config`` and ``test_mse``), refused before training otherwise."""
    def earlier(folder) -> bool:
        run = read_json(folder / "run.json")
        return isinstance(run, dict) and "config" in run and "test_mse" in run

    check_output_folder(out, "--out", ["run.json"], earlier)


def _check_figure_outputs(out: str, paper: List[str], beyond: List[str]) -> None:
    """The files these figures write (``summary.json``, ``runs.json``, ``fig<n>.csv/png``; ``beyond_summary.json``,
    ``fig_<n>.csv/png``) are replaced only where an earlier run's summary (a JSON object with ``meta``) is there
    and names their figure (a ``fig5.png`` of the user's beside a summary of Fig. 1a was overwritten); refused
    before training otherwise."""
    groups = [("summary.json", "fig{}", ["runs.json"] + [f"fig{n}.{x}" for n in paper for x in ("csv", "png")])
              ] if paper else []
    groups += [("beyond_summary.json", "fig_{}", [f"fig_{n}.{x}" for n in beyond for x in ("csv", "png")])
               ] if beyond else []
    for summary, stem, others in groups:
        def earlier(folder, summary=summary, stem=stem):
            return _earlier_figure_files(read_json(folder / summary), summary, stem)

        check_output_folder(out, "--out", [summary, *others], earlier)


def _earlier_figure_files(found, summary: str, stem: str):
    """What an earlier run's ``summary`` (parsed) says it wrote: False when it is none; the summary, ``runs.json``
    and the CSV and PNG of each figure it records (``claims.figure_records``: ``meta.figures``, or an older
    summary's scalar_misalignment names; a beyond summary's figure tables). A summary that records no figure is
    none (a ``{"meta": {}}`` made every name the command writes its own: a user's fig5.png was overwritten)."""
    if not isinstance(found, dict) or "meta" not in found:
        return False
    if summary == "summary.json":
        names, files = list(figure_records(found)), [summary, "runs.json"]
        if not names:
            return False
    else:
        names, files = [n for n in found if n != "meta"], [summary]
    return files + [f"{stem.format(n)}.{x}" for n in names for x in ("csv", "png")]


def _single_run(base: RunConfig, out: str) -> int:
    """One run from the flags: trains, measures its scalar misalignment, writes ``<out>/run.json``."""
    res = train_run(base, progress=True)
    model = res.pop("model")
    res["misalignment"] = {L: scalar_misalignment(model, base.task, L, base.outrep, bits=base.bits)
                           for L in (base.l_train, base.l_test) if L >= 2}
    res["provenance"] = run_provenance()
    os.makedirs(out, exist_ok=True)
    atomic_write_text(os.path.join(out, "run.json"), strict_json(res, indent=1))  # an overflowed MSE as null
    m = res["test_mse"]
    # the validation MSE is on f(y), the test MSEs on y: 'val_mse=0.0335 test_mse@l_train=38.2' read as a bug
    space = f" (of f(y), --outrep {base.outrep})" if base.outrep != "identity" else ""
    print(f"steps={res['steps']} val_mse={res['best_val_mse']:.3g}{space} test_mse@l_train={m[base.l_train - 1]:.3g} "
          f"test_mse@l_test={m[-1]:.3g} ({res['seconds']:.1f}s) -> {out}/run.json")
    return 0


def _figure_names(figure: str) -> List[str]:
    """--figure as a list of figure names ('all' = the paper's, 'beyond' = the sparsity probes')."""
    names = [n.strip() for n in figure.split(",") if n.strip()]
    if not names:  # --figure , ran nothing and said nothing
        raise ValueError(f"figure={figure!r} names no figure; accepted: {', '.join(PAPER_FIGURES + BEYOND_FIGURES)}, "
                         "all, beyond")
    groups = {"all": PAPER_FIGURES, "beyond": BEYOND_FIGURES}  # each stands for its figures, also in a list:
    # 'all,beyond' was refused as "--figure='all' is unknown; accepted: ..., all, beyond"
    names = list(dict.fromkeys(f for n in names for f in groups.get(n, [n])))
    unknown = [n for n in names if n not in PAPER_FIGURES + BEYOND_FIGURES]
    if unknown:
        raise ValueError(f"figure={unknown[0]!r} is unknown; accepted: {', '.join(PAPER_FIGURES + BEYOND_FIGURES)}, "
                          f"all, beyond")
    return names


def _figure_options(a: argparse.Namespace, l_test: int, beyond_only: bool, fig4: bool) -> tuple:
    """(number of seeds, figure 4's l_train values, the lr grid or None) from the flags, checked (the l_train values
    only where Fig. 4 is drawn: each needs test lengths beyond it; ``--l-trains`` is refused where it is not)."""
    n_seeds = a.seeds if a.seeds is not None else (2 if a.quick else 3)
    if n_seeds < 1:
        raise ValueError(f"seeds={n_seeds} must be >= 1")
    if a.l_trains is not None and not fig4:  # '--figure 1a --l-trains 3,5' trained at --l-train, without a word
        raise ValueError(f"--l-trains sets the l_train values of Fig. 4's curves, and --figure {a.figure} does not "
                         "draw Fig. 4 (each of its curves trains at --l-train): drop --l-trains, or add 4 to --figure")
    try:
        default = _QUICK_FIG4_L_TRAINS if a.quick else FIG4_L_TRAINS
        # an empty value ('--l-trains "$UNSET"') is refused, not read as the default
        l_trains = [int(x) for x in a.l_trains.split(",")] if a.l_trains is not None else list(default)
    except ValueError:
        raise ValueError(f"l_trains={a.l_trains!r} must be a comma list of integers") from None
    bad = [x for x in l_trains if not 1 <= x < l_test] if fig4 else []
    if bad:
        raise ValueError(f"--l-trains value {bad[0]} must be in [1, --l-test - 1 = {l_test - 1}]: Fig. 4 measures "
                         "the error beyond each l_train")
    if fig4 and len(set(l_trains)) < 2:  # its claim is a trend over l_train: one value 'held' it over one curve
        raise ValueError(f"l_trains={a.l_trains!r}: Fig. 4 compares the error of two or more different l_train "
                         f"values; give two or more (default {_comma(default)})")
    return n_seeds, l_trains, _lr_grid(a.lrs, beyond_only)


def _lr_grid(lrs: Optional[str], beyond_only: bool) -> Optional[List[float]]:
    """--lrs as a list of positive learning rates (None when not given); it only applies to the paper's figures."""
    if lrs is None:  # an empty --lrs ('--lrs "$UNSET"') trained at --lr without a search, without a word
        return None
    try:
        grid = [float(x) for x in lrs.split(",")]
    except ValueError:
        raise ValueError(f"lrs={lrs!r} must be a comma list of numbers") from None
    if any(not (math.isfinite(lr) and lr > 0) for lr in grid):  # inf: a traceback once training had started
        raise ValueError(f"lrs={lrs!r}: every learning rate must be finite and > 0")
    if beyond_only:
        raise ValueError("--lrs applies to the paper's figures (all, 1a, ..., theory), not to the beyond figures")
    return grid


if __name__ == "__main__":
    sys.exit(main())
