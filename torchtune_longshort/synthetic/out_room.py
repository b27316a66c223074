"""The room the synthetic command's files take, checked before anything trains (``disk_space.check_room``).

Its files are small and predictable: what they hold besides the numbers a run measures is known from the flags. A
single run's ``run.json`` is estimated at most (each number at its longest JSON form): a disk with less room would
fill before the run's result is written. The figures' files are estimated at least, written as the command writes
them, the measured numbers left out (a figure's PNG counted as the smallest PNG): a disk that cannot take that much
would take them neither. Either way the command refuses it before the first run trains (it found the disk full only
when it wrote, after training).
"""

from __future__ import annotations

import csv
import io
import json
import os
from dataclasses import asdict
from typing import List, Optional, Sequence

from torchtune_longshort.disk_space import check_room
from torchtune_longshort.output_guard import strict_json

from .experiments import figure_curves, figure_run_configs
from .misalignment import SPREADS
from .run_cache import cache_path, key
from .train import RunConfig, run_provenance

SMALLEST_PNG = 67  # signature, IHDR, one IDAT and IEND of a 1x1 image: no figure is smaller
LONGEST_FLOAT = -2.2250738585072014e-308  # a float whose JSON form (repr) is the longest any float's is: 24 characters


def _csv_text(rows: List[list]) -> int:
    fh = io.StringIO(newline="")
    csv.writer(fh).writerows(rows)
    return len(fh.getvalue().encode("utf-8"))


def single_run_bytes(base: RunConfig) -> int:
    """``run.json`` at most: a stand-in of the result a run writes (indent 1), each measured number at its longest
    JSON form (:data:`LONGEST_FLOAT`), the step count at ``max_steps``, and this process's own provenance block
    (the run writes the same one: its git state is read once)."""
    n = [LONGEST_FLOAT] * base.l_test
    spread = {k: LONGEST_FLOAT for s in SPREADS for k in (s, s + "_std")}
    res = {"config": asdict(base), "steps": base.max_steps, "best_val_mse": LONGEST_FLOAT,
           "test_lengths": list(range(1, base.l_test + 1)), "test_mse": n, "test_mse_f": n, "seconds": LONGEST_FLOAT,
           "misalignment": {str(L): spread for L in (base.l_train, base.l_test) if L >= 2},
           "provenance": run_provenance()}
    return len(strict_json(res, indent=1).encode("utf-8"))


def figure_configs(paper: Sequence[str], base: RunConfig, seeds: Sequence[int], l_trains: Sequence[int],
                   lrs: Optional[Sequence[float]]) -> List[RunConfig]:
    """Every distinct run the paper figures ``paper`` train (``experiments.figure_run_configs``, each once as
    ``run_all`` trains them: by ``run_cache.key``)."""
    configs = figure_run_configs({n: figure_curves(n, base, l_trains) for n in paper}, seeds, lrs)
    return list({key(c): c for c in configs}.values())


def figure_csv_bytes(name: str, base: RunConfig, seeds: Sequence[int], l_trains: Sequence[int]) -> int:
    """``fig<name>.csv`` at least: its rows (one per curve, seed and test length) with each MSE in one character."""
    rows = [["figure", "curve", "seed", "length", "test_mse"]]
    rows += [[name, label, s, length, ""] for label, c in figure_curves(name, base, l_trains) for s in seeds
             for length in range(1, c.l_test + 1)]
    return _csv_text(rows) + len(rows) - 1


def paper_bytes(paper: Sequence[str], base: RunConfig, seeds: Sequence[int], l_trains: Sequence[int],
                configs: Sequence[RunConfig]) -> int:
    """The paper figures' files in ``--out`` at least: ``runs.json`` (each run's config, ``configs``), each
    ``fig<n>.csv`` and ``fig<n>.png``."""
    runs = sum(len(json.dumps({"config": asdict(c)})) for c in configs)
    return runs + sum(figure_csv_bytes(n, base, seeds, l_trains) + SMALLEST_PNG for n in paper)


def beyond_bytes(beyond: Sequence[str]) -> int:
    """The beyond figures' files at least: each ``fig_<n>.csv``'s header and its PNG."""
    header = _csv_text([["figure", "curve", "seed", "group", "l_test", "accuracy"]])
    return len(beyond) * (header + SMALLEST_PNG)


def cache_bytes(configs: Sequence[RunConfig], cache: Optional[str]) -> int:
    """The ``--cache`` entries at least (each run's config) of the runs it does not hold yet."""
    if cache is None:
        return 0
    return sum(len(json.dumps({"config": asdict(c)})) for c in configs if not os.path.exists(cache_path(cache, c)))


def check_figures_room(out: str, cache: Optional[str], paper: Sequence[str], beyond: Sequence[str],
                       base: RunConfig, seeds: Sequence[int], l_trains: Sequence[int],
                       lrs: Optional[Sequence[float]]) -> None:
    """Refuse, before anything trains, an ``--out`` (or ``--cache``) whose disk cannot take what the figures write
    there (``ValueError`` naming the folder, the bytes and the disk's room)."""
    configs = figure_configs(paper, base, seeds, l_trains, lrs) if paper else []
    need = (paper_bytes(paper, base, seeds, l_trains, configs) if paper else 0) + beyond_bytes(beyond)
    _check(out, "--out", "writing the figures", need)
    stored = cache_bytes(configs, cache)
    if cache is not None and stored:
        _check(cache, "--cache", "storing the runs it does not hold", stored)


def check_single_room(out: str, base: RunConfig) -> None:
    """Refuse, before the run trains, an ``--out`` whose disk cannot take its ``run.json``."""
    _check(out, "--out", "writing run.json", single_run_bytes(base))


def _check(folder: str, option: str, what: str, need: int) -> None:
    check_room(folder, need, f"{option} {folder}: {what}",
               f"free space there, or name {'a' if option == '--cache' else 'an'} {option} on a disk with room")
