"""Command line: ``python -m torchtune_longshort.synthetic ...``

Reproduce the paper's figures:   python -m torchtune_longshort.synthetic --figure all --out docs/synthetic
Test-sized version (< 1 min):    python -m torchtune_longshort.synthetic --figure all --quick --out /tmp/syn
One run of your own:             python -m torchtune_longshort.synthetic --task length --pe rope --outrep inv_sqrt
Beyond the paper (sparsity):     python -m torchtune_longshort.synthetic --figure beyond --out docs/synthetic
The paper's lr search:           python -m torchtune_longshort.synthetic --figure 1b,1c --lrs 5e-5,1e-4,5e-4
"""

from __future__ import annotations

import argparse
import json
import os
import sys

from .experiments import PAPER_FIGURES
from .models import POSITIONAL_ENCODINGS
from .outrep import OUTREPS
from .beyond import BEYOND_FIGURES
from .tasks import BIT_DISTRIBUTIONS, TASKS
from .train import MODELS, OPTIMIZERS, RunConfig



def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python -m torchtune_longshort.synthetic", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--figure", default=None,
                   help=f"comma list of {', '.join(PAPER_FIGURES + BEYOND_FIGURES)}; 'all' = the paper's figures, "
                        f"'beyond' = the sparsity probes. Without --figure: one run from the flags below.")
    p.add_argument("--out", default="synthetic_out", help="output folder (JSON, CSV, PNG)")
    p.add_argument("--cache", default=None,
                   help="folder of per-run JSON results to reuse/resume (default: none, everything is retrained)")
    p.add_argument("--quick", action="store_true", help="test-sized version: short lengths, few steps, 2 seeds")
    p.add_argument("--seeds", type=int, default=None, help="number of seeds (default 3, quick 2)")
    p.add_argument("--workers", type=int, default=None,
                   help="parallel runs in processes (default: min(2, CPUs); quick: 1, in-process, no start-up cost)")
    p.add_argument("--task", default="length", choices=None, help=f"one of {', '.join(TASKS)}")
    p.add_argument("--bits", default="iid", help=f"one of {', '.join(BIT_DISTRIBUTIONS)}")
    p.add_argument("--pe", default="nope", help=f"one of {', '.join(POSITIONAL_ENCODINGS)}")
    p.add_argument("--outrep", default="identity", help=f"one of {', '.join(OUTREPS)}")
    p.add_argument("--model", default="transformer", help=f"one of {', '.join(MODELS)}")
    p.add_argument("--l-train", type=int, default=None, help="train lengths U[1, l_train] (default 10, quick 6)")
    p.add_argument("--l-test", type=int, default=None, help="test lengths 1..l_test (default 50, quick 16)")
    p.add_argument("--l-trains", default=None, help="l_train values of figure 4 (default 10,20,30; quick 6,10)")
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--steps", type=int, default=None, help="max training steps (default 500, quick 30)")
    p.add_argument("--lr", type=float, default=5e-4, help="paper grid: 5e-5, 1e-4, 5e-4")
    p.add_argument("--lrs", default=None,
                   help="with --figure: comma list of learning rates to search per curve and seed (e.g. the paper's "
                        "5e-5,1e-4,5e-4); the run with the lowest training-length validation MSE is kept. "
                        "Multiplies the time by the grid size.")
    p.add_argument("--optimizer", default="adamw", help=f"one of {', '.join(OPTIMIZERS)}")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--seed", type=int, default=0, help="seed of a single run")
    return p


def main(argv=None) -> int:
    a = _parser().parse_args(argv)
    q = a.quick
    l_train = a.l_train if a.l_train is not None else (6 if q else 10)
    l_test = a.l_test if a.l_test is not None else (16 if q else 50)
    steps = a.steps if a.steps is not None else (30 if q else 500)
    workers = a.workers if a.workers is not None else (1 if q else min(2, os.cpu_count() or 1))
    if workers < 1:
        print(f"error: workers={workers} must be >= 1", file=sys.stderr)
        return 2
    base = RunConfig(
        task=a.task, bits=a.bits, pe=a.pe, outrep=a.outrep, model=a.model, l_train=l_train, l_test=l_test,
        dim=a.dim, num_layers=a.layers, num_heads=a.heads, max_steps=steps, lr=a.lr, optimizer=a.optimizer,
        batch_size=a.batch_size, seed=a.seed, eval_every=10 if q else 50, test_per_length=20 if q else 100,
        val_size=256 if q else 2048,
    )
    try:
        base.validate()
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if a.figure is None:
        from .misalignment import scalar_misalignment
        from .train import train_run

        res = train_run(base, progress=True)
        model = res.pop("model")
        res["misalignment"] = {L: scalar_misalignment(model, base.task, L, base.outrep, bits=base.bits)
                               for L in (base.l_train, base.l_test) if L >= 2}
        from torchtune_longshort.provenance import provenance

        res["provenance"] = provenance(device="cpu", stdlib=False)
        os.makedirs(a.out, exist_ok=True)
        with open(os.path.join(a.out, "run.json"), "w") as fh:
            json.dump(res, fh, indent=1)
        m = res["test_mse"]
        print(f"steps={res['steps']} val_mse={res['best_val_mse']:.3g} test_mse@l_train={m[l_train - 1]:.3g} "
              f"test_mse@l_test={m[-1]:.3g} ({res['seconds']:.1f}s) -> {a.out}/run.json")
        return 0
    names = [n.strip() for n in a.figure.split(",") if n.strip()]
    if names == ["all"]:
        names = list(PAPER_FIGURES)
    elif names == ["beyond"]:
        names = list(BEYOND_FIGURES)
    paper = [n for n in names if n in PAPER_FIGURES]
    beyond = [n for n in names if n in BEYOND_FIGURES]
    unknown = [n for n in names if n not in PAPER_FIGURES + BEYOND_FIGURES]
    if unknown:
        print(f"error: figure={unknown[0]!r} is unknown; accepted: {', '.join(PAPER_FIGURES + BEYOND_FIGURES)}, "
              f"all, beyond", file=sys.stderr)
        return 2
    n_seeds = a.seeds if a.seeds is not None else (2 if q else 3)
    if n_seeds < 1:
        print(f"error: seeds={n_seeds} must be >= 1", file=sys.stderr)
        return 2
    try:
        l_trains = [int(x) for x in a.l_trains.split(",")] if a.l_trains else ([6, 10] if q else [10, 20, 30])
    except ValueError:
        print(f"error: l_trains={a.l_trains!r} must be a comma list of integers", file=sys.stderr)
        return 2
    bad = [x for x in l_trains if not 1 <= x <= l_test]
    if bad:
        print(f"error: l_trains value {bad[0]} must be in [1, l_test={l_test}]", file=sys.stderr)
        return 2
    try:
        lrs = [float(x) for x in a.lrs.split(",")] if a.lrs else None
    except ValueError:
        print(f"error: lrs={a.lrs!r} must be a comma list of numbers", file=sys.stderr)
        return 2
    if lrs is not None and any(not lr > 0 for lr in lrs):
        print(f"error: lrs={a.lrs!r}: every learning rate must be > 0", file=sys.stderr)
        return 2
    if lrs and beyond and not paper:
        print("error: --lrs applies to the paper's figures (all, 1a, ..., theory), not to the beyond figures",
              file=sys.stderr)
        return 2
    if paper:
        from .experiments import run_figures

        s = run_figures(paper, a.out, base, seeds=range(n_seeds), workers=workers, l_trains=l_trains,
                        cache_dir=a.cache, lrs=lrs)
        print(f"paper figures {','.join(paper)}: {s['meta']['wall_seconds']:.0f}s -> {a.out}")
    if beyond:
        from .beyond import run_beyond

        s = run_beyond(beyond, a.out, quick=q, seeds=range(n_seeds), workers=workers)
        print(f"beyond figures {','.join(beyond)}: {s['meta'][','.join(beyond)]['wall_seconds']:.0f}s -> {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
